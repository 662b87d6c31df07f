"""Run a script (or a module) with every torch.distributed call traced; for torchrun, whose workers it becomes:

    torchrun --nproc-per-node 4 -m sandbox.trace --trace-dir traces/ train.py --lr 0.1
    python -m sandbox.diagnose traces/

Each rank writes `rank-<RANK>.jsonl` into the trace directory, and `stack-<RANK>.txt` when torchrun ends it. The
target runs through the same runner as a sandbox rank's (`sandbox.rank.run_target`): the same error record, the
same traceback without the sandbox's frames.
"""
from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys

from sandbox import rank as rank_runner
from sandbox import trace
from sandbox.trace import recorder


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m sandbox.trace",
                                description="Run a script with every torch.distributed call traced (use under torchrun).")
    p.add_argument("--trace-dir", default="sandbox-traces", help="where each rank writes rank-<RANK>.jsonl")
    p.add_argument("-m", dest="module", action="store_true", help="run a module (like python -m) instead of a file")
    p.add_argument("target")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    os.makedirs(a.trace_dir, exist_ok=True)
    trace.install()
    armed = recorder.arm(a.trace_dir, rank)  # the Flight Recorder's dump beside the trace: fr-<RANK>.pkl
    trace.start(os.path.join(a.trace_dir, f"rank-{rank}.jsonl"), rank,
                world_size=int(os.environ.get("WORLD_SIZE", "1")), local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                group_rank=os.environ.get("GROUP_RANK"),
                launcher="torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "?", flight=armed)
    # torchrun ends its workers with SIGTERM: leave the Python stack behind first, even if blocked inside gloo
    stack = open(os.path.join(a.trace_dir, f"stack-{rank}.txt"), "w")
    faulthandler.register(signal.SIGUSR1, file=stack, all_threads=True)
    faulthandler.register(signal.SIGTERM, file=stack, all_threads=True, chain=True)
    faulthandler.enable(file=sys.stderr)
    target = ({"kind": "module", "name": a.target, "argv": a.args} if a.module else
              {"kind": "script", "path": a.target, "argv": a.args})
    try:
        return rank_runner.run_target({"target": target}, rank)
    finally:
        trace.forget_groups()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
