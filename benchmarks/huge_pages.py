"""What backing a warm zygote's memory with huge pages (`sandbox._proc.huge_pages`) saves per run.

    python benchmarks/huge_pages.py [--runs 40] [--rounds 3] [--ranks 4]

Each round starts a warm zygote twice, once as the sandbox does by default and once with SANDBOX_HUGE_PAGES=0 (in
turn, the order swapped every round), and launches `--runs` runs of `--ranks` ranks from it, each an all_reduce; the
machine's busy CPU time (/proc/stat, every process: the zygotes, the forks, the launcher) is read around the runs, so
run it on an otherwise idle machine. Printed: CPU and wall time per run for each, and their ratio."""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CHILD = r"""
import os, sys, time
import torch, torch.distributed as dist
from sandbox import launch
def work():
    t = torch.ones(4)
    dist.all_reduce(t)
    assert t[0] == dist.get_world_size()
def busy():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / os.sysconf("SC_CLK_TCK")
if __name__ == "__main__":
    runs, ranks = int(sys.argv[1]), int(sys.argv[2])
    first = launch(work, world_size=ranks, warm=True, init=True)  # starts the warm zygote
    assert first.ok, first.diagnosis.summary
    time.sleep(1.0)  # idle: the zygote's memory goes to huge pages here, as between a user's runs
    b, t = busy(), time.monotonic()
    for _ in range(runs):
        r = launch(work, world_size=ranks, warm=True, init=True)
        assert r.ok, r.diagnosis.summary
    print((busy() - b) / runs, (time.monotonic() - t) / runs)
"""


def one(runs: int, ranks: int, huge: bool) -> tuple[float, float]:
    env = dict(os.environ, SANDBOX_HASH_SEEDS="1")
    if not huge:
        env["SANDBOX_HUGE_PAGES"] = "0"
    out = subprocess.run([sys.executable, "-c", CHILD, str(runs), str(ranks)], env=env, capture_output=True,
                         text=True, timeout=600, check=True).stdout.split()
    return float(out[0]), float(out[1])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=4)
    ns = ap.parse_args(argv)
    got: dict[bool, list] = {True: [], False: []}
    for i in range(ns.rounds):
        for huge in ((True, False) if i % 2 else (False, True)):
            got[huge].append(one(ns.runs, ns.ranks, huge))
    for huge in (False, True):
        cpu = statistics.median(c for c, _ in got[huge]) * 1000
        wall = statistics.median(w for _, w in got[huge]) * 1000
        print(f"{'huge pages' if huge else '4 KiB pages':>12}: {cpu:6.1f} ms CPU, {wall:6.1f} ms wall per run "
              f"of {ns.ranks} ranks (median of {ns.rounds} rounds of {ns.runs})")
    ratio = statistics.median(c for c, _ in got[True]) / statistics.median(c for c, _ in got[False])
    print(f"CPU per run with huge pages / without: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
