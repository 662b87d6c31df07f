"""The ranks' side of a sweep: for every op and size, build the call once, find a form the backend has, time it.

Everything here runs in a rank whose process group is up (`launch(..., init=True)`), inside `trace.paused()`, so
the calls are torch.distributed's own and the figures are PyTorch's, not the tracer's. Rank 0 returns the points.
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import time
from typing import Callable

from sandbox.bench.stats import CHUNKED, MEMCPY_BYTES, point, fmt_size, fmt_time, real_size

_COPIES = 12          # copies of the 64 MiB tensor that measure the limit ...
_COPIES_WARMUP = 2    # ... the first ones untimed


@dataclasses.dataclass(frozen=True)
class Here:
    """What every call of this rank needs: its rank, the world size, its device, and how to wait for the device."""
    me: int
    n: int
    dev: object          # torch.device
    gpu: bool

    def sync(self) -> None:
        if self.gpu:
            import torch

            torch.cuda.synchronize()


def _chunked_call(op: str, size: int, h: Here) -> Callable[[], object]:
    """gather, all_gather, reduce_scatter, all_to_all: `size` is n chunks of size/n (nccl-tests'); tensor forms."""
    import torch
    import torch.distributed as dist

    from sandbox import compat

    c, n, dev = size // (4 * h.n), h.n, h.dev
    if op == "gather":
        inp = torch.ones(c, device=dev)
        outs = [torch.empty(c, device=dev) for _ in range(n)] if h.me == 0 else None
        return lambda: dist.gather(inp, outs, dst=0)
    if op == "all_gather":
        inp, out = torch.ones(c, device=dev), torch.empty(n * c, device=dev)
        return lambda: compat.all_gather_single(out, inp)
    if op == "reduce_scatter":
        inp, out = torch.ones(n * c, device=dev), torch.empty(c, device=dev)
        return lambda: compat.reduce_scatter_single(out, inp)
    inp, out = torch.ones(n * c, device=dev), torch.empty(n * c, device=dev)  # all_to_all
    return lambda: dist.all_to_all_single(out, inp)


def _send_recv(buf, h: Here) -> Callable[[], None]:
    """Every rank sends to rank+1 and receives from rank-1 at once (nccl-tests' sendrecv)."""
    import torch
    import torch.distributed as dist

    rbuf, right, left = torch.empty_like(buf), (h.me + 1) % h.n, (h.me - 1) % h.n
    if h.gpu:
        # NCCL: one grouped call, as nccl-tests' sendrecv (two unbatched p2p ops in opposite directions are
        # serialised and deadlock at large sizes); P2POp wants torch's own isend/irecv, which they are here
        def grouped():
            for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, buf, right), dist.P2POp(dist.irecv, rbuf, left)]):
                w.wait()
        return grouped

    def both():
        for w in (dist.isend(buf, right), dist.irecv(rbuf, left)):
            w.wait()
    return both


def make_call(op: str, size: int, h: Here) -> Callable[[], object]:
    """The call for one point, its buffers allocated once."""
    import torch
    import torch.distributed as dist

    if op == "barrier":
        return lambda: dist.barrier()
    if op in CHUNKED:
        return _chunked_call(op, size, h)
    buf = torch.ones(size // 4, device=h.dev)
    if op == "broadcast":
        return lambda: dist.broadcast(buf, src=0)
    if op == "reduce":
        return lambda: dist.reduce(buf, dst=0)
    if op == "all_reduce":
        return lambda: dist.all_reduce(buf)
    return _send_recv(buf, h)


def list_form(op: str, size: int, h: Here) -> Callable[[], object] | None:
    """The list form of a call where a backend lacks the tensor form (gloo: all_gather_into_tensor), else None."""
    import torch
    import torch.distributed as dist

    c = size // (4 * h.n)
    if op == "all_gather":
        inp, outs = torch.ones(c, device=h.dev), [torch.empty(c, device=h.dev) for _ in range(h.n)]
        return lambda: dist.all_gather(outs, inp)
    if op == "reduce_scatter":
        ins, out = [torch.ones(c, device=h.dev) for _ in range(h.n)], torch.empty(c, device=h.dev)
        return lambda: dist.reduce_scatter(out, ins)
    return None


def _first_line(e: BaseException, cap: int) -> str:
    return str(e).splitlines()[0][:cap] if str(e) else type(e).__name__


def working_call(op: str, size: int, h: Here) -> tuple[Callable | None, str | None]:
    """A form of the call the backend runs, tried once: (call, how) where `how` notes a list form used instead;
    (None, why) when it has neither form. Every rank raises alike, so every rank takes the same branch."""
    call = make_call(op, size, h)
    try:
        call()
        h.sync()
        return call, None
    except (RuntimeError, ValueError) as e:  # the backend lacks this form: try the list form
        first = e
    call = list_form(op, size, h)
    if call is None:
        return None, _first_line(first, 200)
    try:
        call()
        h.sync()
    except (RuntimeError, ValueError) as e:  # neither form: the op is left out, and said so
        return None, _first_line(e, 200)
    return call, f"list form ({type(first).__name__}: {_first_line(first, 100)})"


def timed(call: Callable, h: Here, warmup: int, iters: int) -> list[float]:
    """The K timed calls after the warm-up, each the slowest rank's: a barrier lines the ranks up before each."""
    import torch
    import torch.distributed as dist

    times = []
    for i in range(warmup + iters):
        dist.barrier()
        t0 = time.perf_counter()
        call()
        h.sync()
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
    t = torch.tensor(times, dtype=torch.float64, device=h.dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # an iteration lasts as long as its slowest rank
    return t.cpu().tolist()


def memcpy_GBps(h: Here) -> float:
    """The machine's copy bandwidth, read + write counted: on CPU with all its cores (the ranks run with one thread
    each, the others idle meanwhile), on GPU a device-to-device copy."""
    import torch

    before = torch.get_num_threads()
    if not h.gpu:
        torch.set_num_threads(os.cpu_count() or 1)
    try:
        src = torch.ones(MEMCPY_BYTES // 4, device=h.dev)
        dst = torch.empty_like(src)
        times = []
        for i in range(_COPIES):
            h.sync()
            t0 = time.perf_counter()
            dst.copy_(src)
            h.sync()
            if i >= _COPIES_WARMUP:
                times.append(time.perf_counter() - t0)
        return 2 * MEMCPY_BYTES / statistics.median(times) / 1e9
    finally:
        torch.set_num_threads(before)


def _sweep(ops: list[str], sizes: list[int], iters: int, warmup: int, h: Here, backend: str) -> dict:
    import torch.distributed as dist

    out = {"backend": backend, "n": h.n, "points": [], "unsupported": {},
           "threads": 1 if h.gpu else (os.cpu_count() or 1)}
    dist.barrier()
    if h.me == 0:
        out["memcpy_GBps"] = memcpy_GBps(h)
    dist.barrier()
    for op in ops:
        for size in (sizes if op != "barrier" else [0]):
            size = real_size(op, size, h.n)
            call, how = working_call(op, size, h)
            if call is None:
                out["unsupported"][op] = how
                dist.barrier()
                break
            times = timed(call, h, warmup, iters)
            if h.me == 0:
                p = point(op, h.n, size, times, backend)
                if how:
                    p["note"] = how
                out["points"].append(p)
                print(f"bench: {op} n={h.n} {fmt_size(size)}: {fmt_time(p['lat_median_s'])}", flush=True)
    dist.barrier()
    return out


def rank_sweep(ops: list[str], sizes: list[int], iters: int, warmup: int, gpu: bool) -> dict | None:
    """Sweep `ops` x `sizes` on this rank (the process group is up), untraced; rank 0 returns the points and the
    memcpy limit, the other ranks None."""
    import torch
    import torch.distributed as dist

    from sandbox import trace

    me = dist.get_rank()
    h = Here(me=me, n=dist.get_world_size(), dev=torch.device("cuda", me) if gpu else torch.device("cpu"), gpu=gpu)
    with trace.paused():
        out = _sweep(ops, sizes, iters, warmup, h, dist.get_backend())
    return out if me == 0 else None
