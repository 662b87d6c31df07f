"""Are correct programs ever called hung under load? Runs correct long programs K times each (default 30) with busy
loops beside them (default 2, `python -c "while 1: pass"`), and counts the verdicts. Not part of the test run:

    python benchmarks/false_hang.py [--repeat K] [--busy B] [--only part4|plain]

- part4: benchmarks/core.py part 4's loop of small all_reduces on 2 ranks, as that benchmark runs it (segments
  traced, untraced inside `trace.paused()`, and traced into /dev/null: the Flight Recorder sees calls the trace does
  not, so the watcher asks for its dumps).
- plain: a plain user's long loop on 2 ranks, nothing paused: DDP steps (their gradient all_reduce made in C++, seen
  only by the Flight Recorder) and a Python all_reduce each step, more calls than the recorder keeps (2000), and a
  1.5 s checkpoint on rank 0 every 1000 steps while rank 1 waits in its next all_reduce.

Every run must come back ok; any other verdict is printed with its diagnosis, and the exit code is then 1. It
prints counts, not times: how long a run takes under load says nothing here.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for p in (REPO, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

from core import LOOP_CALLS, LOOP_NUMEL, LOOP_WARMUP, SUBPROCESS_TIMEOUT, _loop_rank  # noqa: E402

PLAIN_STEPS = 2500
PLAIN = f"""\
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
metric = torch.zeros(1)
for step in range({PLAIN_STEPS}):
    opt.zero_grad()
    model(torch.randn(4, 16)).sum().backward()  # DDP's gradient all_reduce, made in C++
    opt.step()
    metric.fill_(float(step))
    dist.all_reduce(metric)  # a metric, from Python
    if rank == 0 and step % 1000 == 999:
        time.sleep(1.5)  # a checkpoint on rank 0; rank 1 waits in its next all_reduce
dist.barrier()
dist.destroy_process_group()
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--busy", type=int, default=2, help="busy loops beside the runs")
    p.add_argument("--only", choices=("part4", "plain"))
    a = p.parse_args()

    from sandbox import launch, run_script

    busy = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(a.busy)]
    counts: dict[str, dict[str, int]] = {}
    bad = 0
    t0 = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="sandbox-false-hang-") as tmp:
            plain = os.path.join(tmp, "plain_loop.py")
            with open(plain, "w") as f:
                f.write(PLAIN)
            work = {"part4": lambda k: launch(_loop_rank, world_size=2, init=True, timeout=SUBPROCESS_TIMEOUT,
                                              args=(LOOP_CALLS, LOOP_NUMEL, LOOP_WARMUP, k % 2 == 0)),
                    "plain": lambda k: run_script(plain, world_size=2, timeout=SUBPROCESS_TIMEOUT * 3)}
            for k in range(a.repeat):
                for name, go in work.items():
                    if a.only and name != a.only:
                        continue
                    res = go(k)
                    verdict = str(getattr(res.verdict, "value", res.verdict))
                    counts.setdefault(name, {}).setdefault(verdict, 0)
                    counts[name][verdict] += 1
                    if verdict != "ok":
                        bad += 1
                        print(f"{name} run {k + 1}: {verdict} [{res.diagnosis.kind}] {res.diagnosis.summary}",
                              flush=True)
                print(f"after {k + 1} of {a.repeat}: {counts} ({time.monotonic() - t0:.0f} s, load"
                      f" {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        for b in busy:
            b.kill()
            b.wait()
    print(f"correct programs called anything but ok: {bad} of {sum(sum(c.values()) for c in counts.values())}"
          f" runs, {a.busy} busy loops beside them")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
