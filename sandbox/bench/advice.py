"""The communication-primitives document's advice, measured (`python -m sandbox.bench --advice`): many small
all_reduces against one flattened, blocking against overlapped, syncing every step against every 4th, and the
kv-sync bug's cache exchange three ways. Each figure is the median over iterations of the slowest rank, and is
printed as a ratio: the advice's claim is about the ratio, not the seconds of this machine.

The ranks measure inside `trace.paused()`, as the sweep does (see `sandbox.bench.sweep`).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

from sandbox.bench.stats import KIB, MIB, fmt_size, fmt_time

ADVICE_N = (3, 4)
KV_LAYERS = 8
KV_SIZES = (64 * KIB, 4 * MIB)  # bytes of one layer's K and V together
_WARMUP = 2


class _Timer:
    """Times named pieces of work on every rank; `out` keeps each median (the slowest rank per iteration)."""

    def __init__(self, iters: int):
        self.iters, self.out = iters, {}

    def __call__(self, name: str, fn: Callable[[], object]) -> None:
        import torch
        import torch.distributed as dist

        times = []
        for i in range(_WARMUP + self.iters):
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            if i >= _WARMUP:
                times.append(time.perf_counter() - t0)
        t = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        self.out[name] = statistics.median(t.tolist())


def _batching(timed: _Timer) -> None:
    """64 gradients of 4 KiB: one all_reduce each, against one all_reduce of them flattened."""
    import torch
    import torch.distributed as dist

    grads = [torch.ones(1024) for _ in range(64)]
    timed("small_each", lambda: [dist.all_reduce(g) for g in grads])

    def flat():
        f = torch.cat(grads)
        dist.all_reduce(f)
        for g, s in zip(grads, f.split(1024)):  # back into the gradients, as DDP's buckets do
            g.copy_(s)
    timed("small_flat", flat)


def _compute() -> Callable[[], None]:
    import torch

    x = torch.rand(192, 192)

    def compute():
        for _ in range(20):
            x @ x
    return compute


def _overlap(timed: _Timer) -> None:
    """A 4 MiB all_reduce then independent compute, against an async all_reduce that overlaps the compute."""
    import torch
    import torch.distributed as dist

    buf, compute = torch.ones(MIB), _compute()
    timed("compute_only", compute)
    timed("blocking", lambda: (dist.all_reduce(buf), compute()))

    def overlapped():
        w = dist.all_reduce(buf, async_op=True)
        compute()
        w.wait()
    timed("overlapped", overlapped)


def _sync_every(timed: _Timer) -> None:
    """8 steps of compute and a 1 MiB gradient: all_reduced every step, against every 4th."""
    import torch
    import torch.distributed as dist

    grad, compute = torch.ones(MIB // 4), _compute()

    def steps(k):
        for s in range(8):
            compute()
            if (s + 1) % k == 0:
                dist.all_reduce(grad)
    timed("sync_every_1", lambda: steps(1))
    timed("sync_every_4", lambda: steps(4))


def _kv_exchanges(cache: dict, owner: dict[int, int], me: int, n: int) -> dict[str, Callable[[], None]]:
    """The kv-sync exchange, every rank ending with every layer's K and V: pairwise, ring, batch_isend_irecv."""
    import torch.distributed as dist

    def pairwise():  # layer by layer, the owner sends to each peer in turn
        for layer, o in owner.items():
            for t in cache[layer]:
                if me == o:
                    for p in range(n):
                        if p != me:
                            dist.send(t, dst=p)
                else:
                    dist.recv(t, src=o)

    def ring():  # layer by layer, owner -> right -> ... until the ring closes
        right, left = (me + 1) % n, (me - 1) % n
        for layer, o in owner.items():
            for t in cache[layer]:
                if me != o:
                    dist.recv(t, src=left)
                if right != o:
                    dist.send(t, dst=right)

    def batched():  # every send and receive posted at once, then waited
        ops = []
        for layer, o in owner.items():
            for t in cache[layer]:
                if me == o:
                    ops += [dist.P2POp(dist.isend, t, p) for p in range(n) if p != me]
                else:
                    ops.append(dist.P2POp(dist.irecv, t, o))
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    return {"pairwise": pairwise, "ring": ring, "batch_isend_irecv": batched}


def _kv_sync(timed: _Timer, kv_sizes: list[int]) -> None:
    import torch
    import torch.distributed as dist

    me, n = dist.get_rank(), dist.get_world_size()
    per = -(-KV_LAYERS // n)
    owner = {layer: layer // per for layer in range(KV_LAYERS)}
    for size in kv_sizes:
        numel = max(1, size // 8)
        cache = {layer: (torch.ones(numel), torch.ones(numel)) for layer in range(KV_LAYERS)}
        for name, fn in _kv_exchanges(cache, owner, me, n).items():
            timed(f"kv_{name}_{size}", fn)


def rank_advice(iters: int, kv_sizes: list[int]) -> dict | None:
    """On every rank (the process group is up), untraced: rank 0 returns {name: seconds}, the others None."""
    import torch.distributed as dist

    from sandbox import trace

    timed = _Timer(iters)
    with trace.paused():
        _batching(timed)
        _overlap(timed)
        _sync_every(timed)
        _kv_sync(timed, kv_sizes)
        dist.barrier()
    return timed.out if dist.get_rank() == 0 else None


def advice(iters: int, timeout: float) -> tuple[dict, list[str]]:
    """{n: {name: seconds}} from one launch per n in ADVICE_N, and the failures."""
    from sandbox.launcher import launch

    got, failures = {}, []
    for n in ADVICE_N:
        res = launch(rank_advice, world_size=n, args=(iters, list(KV_SIZES)), init=True, timeout=timeout,
                     hang_after=max(60.0, timeout / 2))
        if res.ok and res.values and res.values[0]:
            got[n] = res.values[0]
        else:
            failures.append(f"advice n={n}: {res.verdict}: {res.diagnosis.summary}")
    return got, failures


def advice_lines(got: dict) -> list[str]:
    lines = []
    for n, m in got.items():
        lines.append(f"advice, {n} ranks (median time, slowest rank):")
        lines.append(f"  64 all_reduces of 4 KiB {fmt_time(m['small_each'])} vs one flattened"
                     f" {fmt_time(m['small_flat'])}: batching is {m['small_each'] / m['small_flat']:.3g}x faster")
        lines.append(f"  4 MiB all_reduce + compute ({fmt_time(m['compute_only'])} alone): blocking"
                     f" {fmt_time(m['blocking'])}, async overlapped {fmt_time(m['overlapped'])}:"
                     f" blocking/overlapped {m['blocking'] / m['overlapped']:.3g}x")
        lines.append(f"  8 steps, 1 MiB gradient: sync every step {fmt_time(m['sync_every_1'])}, every 4th"
                     f" {fmt_time(m['sync_every_4'])}:"
                     f" every-step/every-4th {m['sync_every_1'] / m['sync_every_4']:.3g}x")
        for size in KV_SIZES:
            pw, ring, bt = (m[f"kv_{k}_{size}"] for k in ("pairwise", "ring", "batch_isend_irecv"))
            lines.append(f"  kv-sync {KV_LAYERS} layers x {fmt_size(size)}: pairwise {fmt_time(pw)}, ring"
                         f" {fmt_time(ring)}, batch_isend_irecv {fmt_time(bt)}; pairwise/ring {pw / ring:.3g},"
                         f" pairwise/batch {pw / bt:.3g}")
    return lines
