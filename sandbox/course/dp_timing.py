"""Lab 22, measured: the three ways to average gradients (the naive loop, `data_parallel.Buckets`, PyTorch's DDP with
the same bucket size) timed on a bigger model, and when each bucket's all_reduce started against backward's span
(the overlap the buckets are for). Run on the ranks (`lab.check(dp_timing.bench, n=4)`); `timings` and
`overlap_words` turn the run's values into the lab's table and lines.
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from sandbox.course.data_parallel import LR, Buckets, local, loss_fn, make_model, setup

BENCH = {"width": 256, "depth": 6, "extra": False}  # 1.3 MB of gradients in 14 tensors, every parameter used
BENCH_BATCH = 64  # samples per rank: enough backward to hide some communication behind
BENCH_CAP = 256 * 1024  # bytes per bucket, ours and DDP's alike


def _each(model, world):
    def finish():
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
    return finish


def bench(steps: int = 5, warmup: int = 2) -> dict:
    """Per rank: the median time of a training step (ms) and the all_reduce calls a step makes, for the naive loop,
    our buckets and DDP (the same bucket size), on the bigger BENCH model."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = setup()
    out = {}
    for name in ("naive", "buckets", "DDP"):
        model = make_model(**BENCH)
        net, finish = model, _each(model, world)
        if name == "buckets":
            buckets = Buckets(model, BENCH_CAP)
            finish, calls = buckets.finish, len(buckets.buckets)
        elif name == "DDP":
            net, finish = DDP(model, bucket_cap_mb=BENCH_CAP / 2**20), (lambda: None)
        opt = torch.optim.SGD(net.parameters(), lr=LR)
        times = []
        for step in range(warmup + steps):
            x, y, hard = local(step, rank, world, BENCH_BATCH * world)
            dist.barrier()  # the ranks start each step together: a step's time, not a wait for a late rank
            t = time.perf_counter()
            opt.zero_grad()
            loss_fn(net(x, hard), y).backward()
            finish()
            opt.step()
            times.append(time.perf_counter() - t)
        if name == "naive":
            calls = len(list(model.parameters()))
        elif name == "DDP":
            data = net._get_ddp_logging_data()  # DDP rebuilds its buckets after the first step, in backward's order
            calls = len(data.get("rebuilt_bucket_sizes", data["bucket_sizes"]).split(","))
        out[name] = {"ms": statistics.median(times[warmup:]) * 1e3, "calls": calls}
    return out


def timings(res) -> str:
    """bench's table: for each way, the slowest rank's median step and the calls per step."""
    values = [r.value for r in res.ranks if isinstance(r.value, dict)]
    if len(values) != len(res.ranks):
        return f"no table: the run ended {res.verdict} ({res.diagnosis.summary})"
    lines = [f"{'':10}{'ms per step (slowest rank)':>28}{'all_reduce calls per step':>28}"]
    for name in values[0]:
        lines.append(f"{name:10}{max(v[name]['ms'] for v in values):28.1f}{values[0][name]['calls']:28d}")
    return "\n".join(lines)


def overlap(steps: int = 2) -> dict:
    """Buckets on the BENCH model; for the last step: how long backward took, and when each bucket's all_reduce
    started and when finish() had waited for them all, in ms from backward's start."""
    rank, world = setup()
    model = make_model(**BENCH)
    buckets = Buckets(model, BENCH_CAP)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(steps):
        x, y, hard = local(step, rank, world, BENCH_BATCH * world)
        opt.zero_grad()
        loss = loss_fn(model(x, hard), y)
        buckets.started_at.clear()
        t0 = time.time()
        loss.backward()
        t1 = time.time()
        buckets.finish()
        t2 = time.time()
        opt.step()
    return {"backward": (t1 - t0) * 1e3, "started": [(s - t0) * 1e3 for s in buckets.started_at],
            "waited": (t2 - t0) * 1e3}


def overlap_words(res) -> str:
    """One line per rank: backward's span, the buckets' start times, how many started during backward."""
    lines = []
    for r in res.ranks:
        v = r.value
        if not isinstance(v, dict):
            return f"no times: the run ended {res.verdict} ({res.diagnosis.summary})"
        during = sum(s <= v["backward"] for s in v["started"])
        starts = ", ".join(f"{s:.1f}" for s in v["started"])
        lines.append(f"rank {r.rank}: backward 0-{v['backward']:.1f} ms; buckets started at {starts} ms"
                     f" ({during} of {len(v['started'])} during backward); all waited by {v['waited']:.1f} ms")
    return "\n".join(lines)
