"""Warm vs cold runs in one Jupyter kernel, measured in a real kernel (jupyter_client), all in one run.

    python benchmarks/warm.py [--runs K]

In a kernel, `launch` forks each run from the kernel's warm zygote: the first run pays one `import torch` (the
warm zygote starting), later runs a fork. Baseline: the same trivial 4-rank job with `warm=False` (a new zygote,
so one `import torch`, every run), in the same kernel.             goal: warm runs after the first <= 0.3 s (median)
The script always exits 0: it is a report, not a test.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CELL = """
import time, statistics
from sandbox import launch, warm
def trivial():  # typed into the cell: it reaches the ranks by value
    import torch, torch.distributed as dist
    dist.init_process_group("gloo"); t = torch.ones(4); dist.all_reduce(t); dist.destroy_process_group()
    return t.sum().item()
def timed(**kw):
    t = time.monotonic(); res = launch(trivial, world_size=4, **kw); dt = time.monotonic() - t
    assert res.ok, res.diagnosis.summary
    return dt
first = timed()                                  # starts the kernel's warm zygote
warm_runs = [timed() for _ in range({runs})]     # fork from it
cold_runs = [timed(warm=False) for _ in range({runs})]
warm.shutdown()
print("RESULT", first, " ".join(map(str, warm_runs)), "|", " ".join(map(str, cold_runs)))
"""


def main() -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/warm.py", description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7, metavar="K", help="warm and cold runs each (default 7)")
    a = ap.parse_args()
    import tempfile

    from jupyter_client import KernelManager

    sys.path.insert(0, os.path.join(REPO, "docs"))
    from labs_run import over_unix_sockets  # the kernel over Unix sockets: no TCP port to lose to a run's connections

    out = []
    with tempfile.TemporaryDirectory(prefix="sandbox-kernel-") as folder:
        km = KernelManager(kernel_name="python3", **over_unix_sockets(folder))
        km.start_kernel(env=dict(os.environ, PYTHONPATH=REPO))
        kc = km.client()
        try:
            kc.start_channels()
            kc.wait_for_ready(timeout=60)
            reply = kc.execute_interactive(CELL.format(runs=a.runs), timeout=600, output_hook=out.append)
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    text = "".join(m["content"].get("text", "") for m in out if m["msg_type"] == "stream")
    if reply["content"]["status"] != "ok" or "RESULT" not in text:
        print("the kernel failed:", reply["content"].get("evalue"), text, file=sys.stderr)
        return 0
    head, cold = text.split("RESULT", 1)[1].split("|")
    first, *warm_runs = map(float, head.split())
    cold_runs = list(map(float, cold.split()))
    w, c = statistics.median(warm_runs), statistics.median(cold_runs)
    print(f"4-rank trivial job in one Jupyter kernel, {a.runs} runs each, {os.cpu_count()} CPUs")
    print(f"  first run (starts the warm zygote)   {first:.3f} s")
    print(f"  warm runs, median                    {w:.3f} s   goal <= 0.3 s: {'PASS' if w <= 0.3 else 'MISS'}")
    print(f"  cold runs (warm=False), median       {c:.3f} s   warm is {c / w:.1f}x faster")
    print(f"  samples: warm {' '.join(f'{x:.3f}' for x in warm_runs)}; cold {' '.join(f'{x:.3f}' for x in cold_runs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
