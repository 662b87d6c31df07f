"""What each communication primitive costs here, with nccl-tests' definitions, and the machine's limit beside it.

    python -m sandbox.bench --quick                    # n = 2, 4; 4 B .. 64 MiB; 5 iterations (under 2 minutes here)
    python -m sandbox.bench -n 2,4,8 --ops all_reduce,all_gather --sizes 4,1K,1M,64M --iters 20
    python -m sandbox.bench --gpu -n 2                 # NCCL, one GPU per rank, sizes up to 1 GiB
    python -m sandbox.bench --quick --json             # every point's fields, for machines
    python -m sandbox.bench --quick --advice --plot out/   # + the advice as ratios, + PNGs (latency, busbw vs size)

One `launch` per world size: its rank function sweeps every op and size, so a sweep costs one torch import per world
size, not one per point. Each point: warm-up calls, then K timed calls; before each call a barrier lines the ranks up,
and `time.perf_counter` brackets the call alone (on GPU, with a `cuda.synchronize` inside the bracket). A call's time
is the slowest rank's (the per-iteration times are all_reduced with MAX), because a collective is done only when
every rank is done. Reported: the median and the p10-p90 spread of those K times.

The size of a point is nccl-tests' (PERFORMANCE.md there), in bytes of float32:
    all_reduce, broadcast, reduce   the buffer each rank holds
    all_gather, gather              the gathered result (n chunks of size/n); the input of a rank is size/n
    reduce_scatter                  the input of a rank (n chunks); each rank's output is size/n
    all_to_all                      what each rank sends in all (n chunks of size/n)
    send_recv                       what each rank sends: every rank isends to rank+1 and irecvs from rank-1 at once
                                    (nccl-tests' sendrecv; with 2 ranks an exchange)
    barrier                         no data: latency only
A size that does not split into n whole float32 chunks is rounded down to one that does (at least one float per
chunk), and the point reports the size it really used, as nccl-tests does.

algbw = size / time (GB/s, 1e9 bytes/s). busbw = algbw * factor, nccl-tests' factor for the op with n ranks:
all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, reduce, send_recv 1. gather has no
factor in nccl-tests: we use (n-1)/n, as for its mirror scatter's data movement through the root (n-1 chunks of
size/n cross the root's link), and say so here. busbw is the figure to hold against the hardware's limit.

The limit: in the same run, rank 0 times a copy of a 64 MiB tensor (`dst.copy_(src)`, the other ranks waiting in a
barrier), counting read + write (2 x 64 MiB per copy); on GPU a device-to-device copy. The table gives every busbw as a
fraction of it.

An alpha-beta model (latency = alpha + size / beta) is fitted to each op's points, by least squares on relative
error, and printed with its RMS relative residual: alpha is the per-call cost, beta the bandwidth it tends to.

`--advice` measures the communication-primitives document's advice on 3 and 4 ranks (one more launch each): 64
all_reduces of 4 KiB against one flattened all_reduce (cat, reduce, copy back); a 4 MiB all_reduce then independent
compute against an async all_reduce overlapping that compute; 8 training steps syncing a 1 MiB gradient every step
against every 4th; and the kv-sync bug's cache exchange (8 layers, each rank owning a slice, every rank ending with
all) done pairwise, as a ring, and as one `batch_isend_irecv`. Each is printed as a ratio of medians.

The ranks call torch.distributed's own functions, not the sandbox tracer's wrappers, so the tracer's per-call cost is
not in the figures; a hang inside the sweep is therefore stopped by the run's timeout, not named by the hang rule.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import sys
import threading
import time

from sandbox import cli

OPS = ("barrier", "broadcast", "reduce", "all_reduce", "gather", "all_gather", "reduce_scatter", "all_to_all",
       "send_recv")
ALIASES = {"send/recv": "send_recv", "sendrecv": "send_recv", "alltoall": "all_to_all", "allreduce": "all_reduce",
           "allgather": "all_gather", "reducescatter": "reduce_scatter"}
CHUNKED = {"gather", "all_gather", "reduce_scatter", "all_to_all"}  # size = n chunks of size/n

# nccl-tests' bus-bandwidth factor per op, as a function of the world size n (None: latency only)
FACTORS = {
    "barrier": None,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "gather": lambda n: (n - 1) / n,          # not in nccl-tests: the factor of its mirror, scatter
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
DEFAULT_SIZES_CPU = (4, 256, 4 * KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB)
DEFAULT_SIZES_GPU = (4, 4 * KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB, GIB)
QUICK_SIZES = (4, 64 * KIB, 4 * MIB, 64 * MIB)
MEMCPY_BYTES = 64 * MIB


def bus_factor(op: str, n: int) -> float | None:
    f = FACTORS[op]
    return None if f is None else f(n)


def real_size(op: str, size: int, n: int) -> int:
    """The bytes a point really moves by nccl-tests' definition, `size` rounded down to whole float32 chunks."""
    if op == "barrier":
        return 0
    if op in CHUNKED:
        return max(1, size // (4 * n)) * 4 * n
    return max(1, size // 4) * 4


# ------------------------------------------------------------------------------------------------ in the ranks

def _untraced():
    """In a rank: a lookup of torch's own functions, not the tracer's wrappers (their cost is not what we measure),
    with Work.wait unwrapped too; returns (plain(name), the tracer's Work.wait, to put back afterwards)."""
    import torch
    import torch.distributed as dist

    def plain(name):
        fn = getattr(dist, name)
        return getattr(fn, "__sandbox_traced__", fn)

    Work = torch._C._distributed_c10d.Work
    traced_wait = Work.wait
    Work.wait = getattr(traced_wait, "__sandbox_traced__", traced_wait)
    return plain, traced_wait


def _rank(ops: list[str], sizes: list[int], iters: int, warmup: int, gpu: bool) -> dict | None:
    """Sweep `ops` x `sizes` on this rank (the process group is up); rank 0 returns the points and the memcpy limit."""
    import torch
    import torch.distributed as dist

    plain, traced_wait = _untraced()
    barrier, all_reduce = plain("barrier"), plain("all_reduce")
    me, n = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", me) if gpu else torch.device("cpu")
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    backend = dist.get_backend()

    def make(op: str, size: int):
        """The call for one point, its buffers allocated once."""
        if op == "barrier":
            return lambda: barrier()
        if op in CHUNKED:
            c = size // (4 * n)
            if op == "gather":
                inp = torch.ones(c, device=dev)
                outs = [torch.empty(c, device=dev) for _ in range(n)] if me == 0 else None
                fn = plain("gather")
                return lambda: fn(inp, outs, dst=0)
            if op == "all_gather":
                inp, out = torch.ones(c, device=dev), torch.empty(n * c, device=dev)
                fn = plain("all_gather_single" if hasattr(dist, "all_gather_single") else "all_gather_into_tensor")
                return lambda: fn(out, inp)
            if op == "reduce_scatter":
                inp, out = torch.ones(n * c, device=dev), torch.empty(c, device=dev)
                fn = plain("reduce_scatter_single" if hasattr(dist, "reduce_scatter_single")
                           else "reduce_scatter_tensor")
                return lambda: fn(out, inp)
            inp, out = torch.ones(n * c, device=dev), torch.empty(n * c, device=dev)  # all_to_all
            fn = plain("all_to_all_single")
            return lambda: fn(out, inp)
        buf = torch.ones(size // 4, device=dev)
        if op == "broadcast":
            fn = plain("broadcast")
            return lambda: fn(buf, src=0)
        if op == "reduce":
            fn = plain("reduce")
            return lambda: fn(buf, dst=0)
        if op == "all_reduce":
            return lambda: all_reduce(buf)
        rbuf = torch.empty_like(buf)  # send_recv
        isend, irecv = plain("isend"), plain("irecv")
        if gpu:
            # NCCL: one grouped call, as nccl-tests' sendrecv (two unbatched p2p ops in opposite directions are
            # serialised and deadlock at large sizes). P2POp wants torch.distributed's own isend/irecv, which the
            # tracer wraps: tracing is off for the call (set_sink(None)) so the timing stays untraced
            from sandbox import trace
            batch = plain("batch_isend_irecv")

            def send_recv():
                sink = trace.set_sink(None)
                try:
                    ops = [dist.P2POp(dist.isend, buf, (me + 1) % n), dist.P2POp(dist.irecv, rbuf, (me - 1) % n)]
                    for w in batch(ops):
                        w.wait()
                finally:
                    trace.set_sink(sink)
            return send_recv

        def send_recv():
            for w in (isend(buf, (me + 1) % n), irecv(rbuf, (me - 1) % n)):
                w.wait()
        return send_recv

    def fallback(op: str, size: int):
        """The list form of a call where a backend lacks the tensor form (gloo: all_gather_into_tensor)."""
        c = size // (4 * n)
        if op == "all_gather":
            inp, outs = torch.ones(c, device=dev), [torch.empty(c, device=dev) for _ in range(n)]
            fn = plain("all_gather")
            return lambda: fn(outs, inp)
        if op == "reduce_scatter":
            ins, out = [torch.ones(c, device=dev) for _ in range(n)], torch.empty(c, device=dev)
            fn = plain("reduce_scatter")
            return lambda: fn(out, ins)
        return None

    def memcpy_GBps() -> float:
        """The machine's copy bandwidth: all its cores (the ranks run with one thread each), the others idle."""
        if not gpu:
            before = torch.get_num_threads()
            torch.set_num_threads(os.cpu_count() or 1)
            try:
                return copy_GBps()
            finally:
                torch.set_num_threads(before)
        return copy_GBps()

    def copy_GBps() -> float:
        src = torch.ones(MEMCPY_BYTES // 4, device=dev)
        dst = torch.empty_like(src)
        times = []
        for i in range(12):
            sync()
            t0 = time.perf_counter()
            dst.copy_(src)
            sync()
            if i >= 2:
                times.append(time.perf_counter() - t0)
        return 2 * MEMCPY_BYTES / statistics.median(times) / 1e9

    try:
        out = {"backend": backend, "n": n, "points": [], "unsupported": {},
               "threads": 1 if gpu else (os.cpu_count() or 1)}
        barrier()
        if me == 0:
            out["memcpy_GBps"] = memcpy_GBps()
        barrier()
        for op in ops:
            for size in (sizes if op != "barrier" else [0]):
                size = real_size(op, size, n)
                call, how = make(op, size), None
                try:
                    call()
                    sync()
                except (RuntimeError, ValueError) as e:  # the backend lacks this form: every rank raises alike
                    call = fallback(op, size)
                    how = f"list form ({type(e).__name__}: {str(e).splitlines()[0][:100]})"
                    if call is None:
                        out["unsupported"][op] = str(e).splitlines()[0][:200]
                        barrier()
                        break
                    try:
                        call()
                        sync()
                    except (RuntimeError, ValueError) as e2:  # neither form: the op is left out, and said so
                        out["unsupported"][op] = str(e2).splitlines()[0][:200]
                        barrier()
                        break
                times = []
                for i in range(warmup + iters):
                    barrier()
                    t0 = time.perf_counter()
                    call()
                    sync()
                    dt = time.perf_counter() - t0
                    if i >= warmup:
                        times.append(dt)
                t = torch.tensor(times, dtype=torch.float64, device=dev)
                all_reduce(t, op=dist.ReduceOp.MAX)  # an iteration lasts as long as its slowest rank
                if me == 0:
                    p = _point(op, n, size, t.cpu().tolist(), backend)
                    if how:
                        p["note"] = how
                    out["points"].append(p)
                    print(f"bench: {op} n={n} {fmt_size(size)}: {fmt_time(p['lat_median_s'])}", flush=True)
        barrier()
        return out if me == 0 else None
    finally:
        torch._C._distributed_c10d.Work.wait = traced_wait  # the tracer's again


def _point(op: str, n: int, size: int, times: list[float], backend: str) -> dict:
    med = statistics.median(times)
    if len(times) >= 2:
        q = statistics.quantiles(times, n=10, method="inclusive")
        p10, p90 = q[0], q[-1]
    else:
        p10 = p90 = times[0]
    f = bus_factor(op, n)
    algbw = size / med / 1e9 if f is not None else None
    return {"op": op, "n": n, "backend": backend, "size_bytes": size, "iters": len(times),
            "lat_median_s": med, "lat_p10_s": p10, "lat_p90_s": p90, "lat_min_s": min(times),
            "lat_max_s": max(times), "algbw_GBps": algbw, "busbw_factor": f,
            "busbw_GBps": None if f is None else algbw * f}


# ------------------------------------------------------------------------------------------------ wording

def fmt_size(b: int) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if b >= scale and b % scale == 0:
            return f"{b // scale} {unit}"
    return f"{b} B"


def fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.3g} us"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


def fmt_bw(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def table(points: list[dict], memcpy: dict[int, float]) -> str:
    head = ("op", "n", "size", "latency", "p10-p90", "algbw GB/s", "busbw GB/s", "of memcpy")
    rows = []
    for p in points:
        lim = memcpy.get(p["n"])
        share = "-" if p["busbw_GBps"] is None or not lim else f"{100 * p['busbw_GBps'] / lim:.2g}%"
        share = "<0.01%" if share.endswith("%") and 100 * p["busbw_GBps"] / lim < 0.01 else share
        rows.append((p["op"], str(p["n"]), fmt_size(p["size_bytes"]) if p["op"] != "barrier" else "-",
                     fmt_time(p["lat_median_s"]), f"{fmt_time(p['lat_p10_s'])}-{fmt_time(p['lat_p90_s'])}",
                     fmt_bw(p["algbw_GBps"]), fmt_bw(p["busbw_GBps"]), share))
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    right = {1, 2, 3, 5, 6, 7}
    lines = []
    for r in [head, tuple("-" * w for w in widths)] + rows:
        lines.append("  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in
                               enumerate(zip(r, widths))).rstrip())
    return "\n".join(lines)


def alpha_beta(points: list[dict]) -> list[dict]:
    """latency = alpha + size / beta fitted per (op, n) by least squares on relative error (weights 1/t^2, so the
    4 B point counts as much as the 64 MiB one), with the RMS relative residual. beta is in algbw's units (GB/s)."""
    fits = []
    for key in sorted({(p["op"], p["n"]) for p in points if p["op"] != "barrier"}, key=lambda k: (OPS.index(k[0]),
                                                                                                  k[1])):
        pts = [(p["size_bytes"], p["lat_median_s"]) for p in points if (p["op"], p["n"]) == key]
        if len(pts) < 2:
            continue
        w = [1 / t ** 2 for _, t in pts]
        sw, sx, sy = sum(w), sum(wi * s for wi, (s, _) in zip(w, pts)), sum(wi * t for wi, (_, t) in zip(w, pts))
        sxx = sum(wi * s * s for wi, (s, _) in zip(w, pts))
        sxy = sum(wi * s * t for wi, (s, t) in zip(w, pts))
        det = sw * sxx - sx * sx
        if det <= 0:
            continue
        b = (sw * sxy - sx * sy) / det
        a = (sy - b * sx) / sw
        resid = math.sqrt(sum(((a + b * s) / t - 1) ** 2 for s, t in pts) / len(pts))
        fits.append({"op": key[0], "n": key[1], "alpha_s": a, "beta_GBps": 1 / b / 1e9 if b > 0 else None,
                     "rms_rel_residual": resid, "points": len(pts)})
    return fits


def fit_table(fits: list[dict]) -> str:
    head = ("op", "n", "alpha", "beta GB/s", "residual")
    rows = [(f["op"], str(f["n"]), fmt_time(f["alpha_s"]) if f["alpha_s"] > 0 else f"{f['alpha_s'] * 1e6:.3g} us",
             fmt_bw(f["beta_GBps"]), f"{100 * f['rms_rel_residual']:.2g}%") for f in fits]
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                     for r in [head, tuple("-" * w for w in widths)] + rows)


# ------------------------------------------------------------------------------------------------ the advice, measured

ADVICE_N = (3, 4)
KV_LAYERS = 8
KV_SIZES = (64 * KIB, 4 * MIB)  # bytes of one layer's K and V together


def _advice_rank(iters: int, kv_sizes: list[int]) -> dict | None:
    """The document's advice as ratios (each figure: median over iterations of the slowest rank), and the kv-sync
    exchange three ways. Rank 0 returns {name: seconds}."""
    import torch
    import torch.distributed as dist

    plain, traced_wait = _untraced()
    barrier, all_reduce = plain("barrier"), plain("all_reduce")
    # the kv-sync exchange calls the traced functions, all three alike: P2POp accepts only the isend/irecv that
    # torch.distributed holds now (the tracer's), and a tracer's microseconds are nothing beside a layer's cache
    send, recv, isend, irecv, batch = dist.send, dist.recv, dist.isend, dist.irecv, dist.batch_isend_irecv
    me, n = dist.get_rank(), dist.get_world_size()
    out = {}

    def timed(name, fn, warmup=2):
        times = []
        for i in range(warmup + iters):
            barrier()
            t0 = time.perf_counter()
            fn()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        t = torch.tensor(times, dtype=torch.float64)
        all_reduce(t, op=dist.ReduceOp.MAX)
        out[name] = statistics.median(t.tolist())

    try:
        # 1. many small all_reduces vs one flattened: 64 gradients of 4 KiB
        grads = [torch.ones(1024) for _ in range(64)]
        timed("small_each", lambda: [all_reduce(g) for g in grads])

        def flat():
            f = torch.cat(grads)
            all_reduce(f)
            for g, s in zip(grads, f.split(1024)):  # back into the gradients, as DDP's buckets do
                g.copy_(s)
        timed("small_flat", flat)

        # 2. async all_reduce overlapping independent compute vs blocking then compute: 4 MiB, matmuls
        buf, x = torch.ones(MIB), torch.rand(192, 192)

        def compute():
            for _ in range(20):
                x @ x
        timed("compute_only", compute)
        timed("blocking", lambda: (all_reduce(buf), compute()))

        def overlapped():
            w = all_reduce(buf, async_op=True)
            compute()
            w.wait()
        timed("overlapped", overlapped)

        # 3. sync every step vs every k steps: 8 steps of compute + a 1 MiB gradient all_reduce
        grad = torch.ones(MIB // 4)

        def steps(k):
            for s in range(8):
                compute()
                if (s + 1) % k == 0:
                    all_reduce(grad)
        timed("sync_every_1", lambda: steps(1))
        timed("sync_every_4", lambda: steps(4))

        # 4. the kv-sync exchange: every rank ends with every layer's K and V
        per = -(-KV_LAYERS // n)
        owner = {layer: layer // per for layer in range(KV_LAYERS)}
        for size in kv_sizes:
            numel = max(1, size // 8)
            cache = {layer: (torch.ones(numel), torch.ones(numel)) for layer in range(KV_LAYERS)}

            def pairwise():  # layer by layer, the owner sends to each peer in turn
                for layer, o in owner.items():
                    for t in cache[layer]:
                        if me == o:
                            for p in range(n):
                                if p != me:
                                    send(t, dst=p)
                        else:
                            recv(t, src=o)

            def ring():  # layer by layer, owner -> right -> ... until the ring closes
                right, left = (me + 1) % n, (me - 1) % n
                for layer, o in owner.items():
                    for t in cache[layer]:
                        if me != o:
                            recv(t, src=left)
                        if right != o:
                            send(t, dst=right)

            def batched():  # every send and receive posted at once, then waited
                ops = []
                for layer, o in owner.items():
                    for t in cache[layer]:
                        if me == o:
                            ops += [dist.P2POp(isend, t, p) for p in range(n) if p != me]
                        else:
                            ops.append(dist.P2POp(irecv, t, o))
                for w in batch(ops):
                    w.wait()
            for name, fn in (("pairwise", pairwise), ("ring", ring), ("batch_isend_irecv", batched)):
                timed(f"kv_{name}_{size}", fn)
        barrier()
        return out if me == 0 else None
    finally:
        torch._C._distributed_c10d.Work.wait = traced_wait  # the tracer's again


def advice(iters: int, timeout: float) -> tuple[dict, list[str]]:
    """{n: {name: seconds}} from one launch per n in ADVICE_N, and the failures."""
    from sandbox.launcher import launch

    got, failures = {}, []
    for n in ADVICE_N:
        res = launch(_advice_rank, world_size=n, args=(iters, list(KV_SIZES)), init=True, timeout=timeout,
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


# ------------------------------------------------------------------------------------------------ plots

def plot(points: list[dict], memcpy: dict[int, float], outdir: str, gpu: bool = False) -> list[str]:
    """latency-n{N}.png and busbw-n{N}.png in `outdir`: one line per op against size, the copy limit drawn in."""
    from matplotlib.figure import Figure  # not pyplot: drawing a file must not switch a notebook's backend

    os.makedirs(outdir, exist_ok=True)
    written = []
    for n in sorted({p["n"] for p in points}):
        mine = [p for p in points if p["n"] == n and p["op"] != "barrier"]
        for what, key, label in (("latency", "lat_median_s", "latency (s, median)"),
                                 ("busbw", "busbw_GBps", "bus bandwidth (GB/s)")):
            fig = Figure(figsize=(8, 5))
            ax = fig.add_subplot()
            for op in OPS:
                xs = [(p["size_bytes"], p[key]) for p in mine if p["op"] == op]
                if xs:
                    ax.plot([x for x, _ in xs], [y for _, y in xs], marker="o", label=op)
            if what == "busbw" and memcpy.get(n):
                ax.axhline(memcpy[n], color="black", linestyle="--",
                           label=f"{'device' if gpu else 'memory'} copy {memcpy[n]:.3g} GB/s")
            bar = [p for p in points if p["n"] == n and p["op"] == "barrier"]
            if what == "latency" and bar:
                ax.axhline(bar[0]["lat_median_s"], color="grey", linestyle=":", label="barrier")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("size (bytes, nccl-tests' definition)")
            ax.set_ylabel(label)
            ax.set_title(f"{'NCCL' if gpu else 'gloo'}, {n} ranks: {what}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
            path = os.path.join(outdir, f"{what}-n{n}.png")
            fig.savefig(path, dpi=100, bbox_inches="tight")
            written.append(path)
    return written


# ------------------------------------------------------------------------------------------------ command line

def _sizes(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        s = part.strip().upper().removesuffix("IB").removesuffix("B")
        mult = {"K": KIB, "M": MIB, "G": GIB}.get(s[-1:], 1)
        num = s[:-1] if mult > 1 else s
        try:
            v = int(num) * mult
        except ValueError:
            raise cli.argparse.ArgumentTypeError(f"{part.strip()!r} is not a size (bytes, or with K, M, G)") from None
        if v < 4:
            raise cli.argparse.ArgumentTypeError(f"{part.strip()} is less than one float32 (4 bytes)")
        out.append(v)
    return sorted(set(out))


def _ops(text: str) -> list[str]:
    if text.strip() == "all":
        return list(OPS)
    out = []
    for part in text.split(","):
        name = ALIASES.get(part.strip().lower(), part.strip().lower())
        if name not in OPS:
            raise cli.argparse.ArgumentTypeError(f"{part.strip()!r} is not one of {', '.join(OPS)}")
        if name not in out:
            out.append(name)
    return out


def _world_sizes(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        v = cli.positive_int(part.strip())
        if v < 2:
            raise cli.argparse.ArgumentTypeError(f"{v} rank has no one to talk to: give 2 or more")
        out.append(v)
    return sorted(set(out))


def parse(argv=None):
    p = cli.Parser(prog="python -m sandbox.bench", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a short sweep: n=2,4; 4 B, 64 KiB, 4 MiB, 64 MiB; 5 iters")
    p.add_argument("-n", type=_world_sizes, help="world sizes, e.g. 2,4,8 (default 2,4,8; --gpu: 2)")
    p.add_argument("--ops", type=_ops, help=f"ops, comma-separated, or all (default): {', '.join(OPS)}")
    p.add_argument("--sizes", type=_sizes, help="message sizes in bytes, K/M/G = KiB/MiB/GiB, e.g. 4,1K,1M,64M")
    p.add_argument("--iters", type=cli.positive_int, help="timed iterations per point (default 20; --quick 5)")
    p.add_argument("--warmup", type=int, default=None, help="untimed iterations first (default 3; --quick 2)")
    p.add_argument("--json", action="store_true", help="print every point's fields as JSON on stdout")
    p.add_argument("--gpu", action="store_true", help="NCCL, one GPU per rank")
    p.add_argument("--advice", action="store_true",
                   help="also measure the document's advice (batching, overlap, sync every k) and the kv-sync"
                        " exchange (pairwise, ring, batch_isend_irecv) on 3 and 4 ranks, as ratios")
    p.add_argument("--plot", metavar="DIR", help="write latency and bus-bandwidth PNGs there")
    p.add_argument("--timeout", type=cli.positive_seconds, default=900.0, help="limit per world size, s (900)")
    a = p.parse_args(argv)
    if a.warmup is not None and a.warmup < 0:
        p.error(f"--warmup {a.warmup} must be 0 or more")
    a.n = a.n or ([2, 4] if a.quick else [2] if a.gpu else [2, 4, 8])
    a.ops = a.ops or list(OPS)
    a.sizes = a.sizes or list(QUICK_SIZES if a.quick else DEFAULT_SIZES_GPU if a.gpu else DEFAULT_SIZES_CPU)
    a.iters = a.iters or (5 if a.quick else 20)
    a.warmup = a.warmup if a.warmup is not None else (2 if a.quick else 3)
    return a


def main(argv=None) -> int:
    a = parse(argv)
    from sandbox.launcher import Interrupted, UsageError, launch

    lock = threading.Lock()

    def echo(rank, line):  # rank 0's progress lines, as they come
        with lock:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    t0 = time.perf_counter()
    points, memcpy, unsupported, failures, threads = [], {}, {}, [], None
    for n in a.n:
        try:
            res = launch(_rank, world_size=n, args=(a.ops, a.sizes, a.iters, a.warmup, a.gpu), init=True,
                         gpu=a.gpu, timeout=a.timeout, hang_after=max(60.0, a.timeout / 2), on_output=echo)
        except UsageError as e:
            print(f"sandbox.bench: {e}", file=sys.stderr)
            return 2
        except Interrupted:
            print("sandbox.bench: interrupted.", file=sys.stderr)
            return cli.INTERRUPTED
        if not res.ok or not res.values or not res.values[0]:
            failures.append(f"n={n}: {res.verdict}: {res.diagnosis.summary}")
            continue
        got = res.values[0]
        points += got["points"]
        if "memcpy_GBps" in got:
            memcpy[n] = got["memcpy_GBps"]
            threads = got.get("threads")
        for op, why in got["unsupported"].items():
            unsupported[f"{op} (n={n})"] = why
    points.sort(key=lambda p: (OPS.index(p["op"]), p["n"], p["size_bytes"]))
    adv = {}
    if a.advice:
        try:
            adv, more = advice(a.iters, a.timeout)
        except Interrupted:
            print("sandbox.bench: interrupted.", file=sys.stderr)
            return cli.INTERRUPTED
        failures += more
    wall = time.perf_counter() - t0
    if a.json:
        print(json.dumps({"points": points, "memcpy_GBps": {str(k): v for k, v in memcpy.items()},
                          "memcpy_bytes": MEMCPY_BYTES, "memcpy_threads": threads, "unsupported": unsupported,
                          "failures": failures,
                          "advice_s": {str(k): v for k, v in adv.items()}, "alpha_beta": alpha_beta(points),
                          "wall_s": wall, "gpu": a.gpu}, indent=1))
    else:
        if points:
            print(table(points, memcpy))
        lim = ", ".join(f"{v:.3g} GB/s (n={k} run)" for k, v in memcpy.items())
        if lim:
            print(f"\nlimit: {'device' if a.gpu else 'memory'} copy of {fmt_size(MEMCPY_BYTES)} by rank 0"
                  f"{'' if a.gpu else f' ({threads} torch thread(s))'}, read + write counted: {lim}")
        for what, why in unsupported.items():
            print(f"not measured: {what}: {why}")
        fits = alpha_beta(points)
        if fits:
            print("\nalpha-beta model, latency = alpha + size / beta (fitted on relative error; RMS residual):")
            print(fit_table(fits))
            print()
        for line in advice_lines(adv):
            print(line)
        print(f"median of {a.iters} iterations after {a.warmup} warm-up, slowest rank per iteration;"
              f" {wall:.0f} s in all")
    if a.plot and points:
        try:
            for path in plot(points, memcpy, a.plot, a.gpu):
                print(f"plot: {path}", file=sys.stderr)
        except OSError as e:
            print(f"sandbox.bench: no plots: {e}", file=sys.stderr)
            failures.append(f"plots: {e}")
    for f in failures:
        print(f"sandbox.bench: failed: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(cli.guarded(main, "sandbox.bench"))
