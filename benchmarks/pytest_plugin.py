"""A 4-rank distributed test under the sandbox's pytest plugin vs under PyTorch's MultiProcessTestCase
(torch/testing/_internal/common_distributed.py), each as its own `python -m pytest` command, in one run.

    python benchmarks/pytest_plugin.py [--repeat 3] [--hang-timeout 60]

Two tests, each written both ways: one that passes (an all_reduce over 4 ranks), one that hangs (rank 2
broadcasts while the others all_reduce). MultiProcessTestCase spawns a process per rank for each test and reports
a hung rank only at its timeout (DISTRIBUTED_TESTS_DEFAULT_TIMEOUT, 300 s by default; --hang-timeout sets it
here); the sandbox forks its ranks from one torch import and names the hang. Prints each median and the ratio.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SANDBOX_TESTS = '''
import pytest
import torch
import torch.distributed as dist


@pytest.mark.sandbox(world_size=4)
def test_passes():
    t = torch.ones(2) * dist.get_rank()
    dist.all_reduce(t)
    assert t.tolist() == [6.0, 6.0]


@pytest.mark.sandbox(world_size=4)
def test_hangs():
    t = torch.ones(2)
    if dist.get_rank() == 2:
        dist.broadcast(t, src=0)
    else:
        dist.all_reduce(t)
'''

MPTC_TESTS = '''
import torch
import torch.distributed as dist
from torch.testing._internal.common_distributed import MultiProcessTestCase


class AllReduce(MultiProcessTestCase):
    @property
    def world_size(self):
        return 4

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    def _init(self):
        dist.init_process_group("gloo", init_method=f"file://{self.file_name}", rank=self.rank,
                                world_size=self.world_size)

    def test_passes(self):
        self._init()
        t = torch.ones(2) * self.rank
        dist.all_reduce(t)
        self.assertEqual(t.tolist(), [6.0, 6.0])
        dist.destroy_process_group()

    def test_hangs(self):
        self._init()
        t = torch.ones(2)
        if self.rank == 2:
            dist.broadcast(t, src=0)
        else:
            dist.all_reduce(t)
'''


def pytest_once(path: str, test: str, env: dict) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", f"{path}", "-k", test],
                       cwd=os.path.dirname(path), env=env, capture_output=True, text=True, timeout=900)
    return time.perf_counter() - t0, p.returncode, (p.stdout + p.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hang-timeout", type=int, default=60, help="MultiProcessTestCase's timeout for the hang, s")
    a = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               DISTRIBUTED_TESTS_DEFAULT_TIMEOUT=str(a.hang_timeout))
    with tempfile.TemporaryDirectory(prefix="bench-plugin-") as d:
        paths = {"sandbox plugin": os.path.join(d, "test_sandbox_way.py"),
                 "MultiProcessTestCase": os.path.join(d, "test_mptc_way.py")}
        for (name, path), text in zip(paths.items(), (SANDBOX_TESTS, MPTC_TESTS)):
            with open(path, "w") as f:
                f.write(text)
        med = {}
        for test, runs in (("passes", a.repeat), ("hangs", 1)):
            for name, path in paths.items():
                times = []
                for _ in range(runs):
                    s, code, out = pytest_once(path, test, env)
                    want = 0 if test == "passes" else 1
                    if code != want:
                        print(f"{name} {test}: exit {code}, expected {want}\n{out[-3000:]}")
                        return 1
                    times.append(s)
                med[(test, name)] = statistics.median(times)
                print(f"{test:6}  {name:22} median {med[(test, name)]:7.2f} s over {runs} run(s)", flush=True)
        for test in ("passes", "hangs"):
            ratio = med[(test, "MultiProcessTestCase")] / med[(test, "sandbox plugin")]
            print(f"{test}: MultiProcessTestCase takes {ratio:.1f}x the sandbox plugin's time")
        print(f"(MultiProcessTestCase's timeout for the hang: {a.hang_timeout} s; its default is 300 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
