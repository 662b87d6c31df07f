"""Run a script (or a module) with every torch.distributed call traced; for torchrun, whose workers it becomes:

    torchrun --nproc-per-node 4 -m sandbox.trace --trace-dir traces/ train.py --lr 0.1
    python -m sandbox.diagnose traces/

Each rank writes `rank-<RANK>.jsonl` into the trace directory, and `stack-<RANK>.txt` when torchrun ends it. The
target runs through the same runner as a sandbox rank's (`sandbox.rank.run_target`): the same error record, the
same traceback without the sandbox's frames, the same end (sandbox/ending.py). When torchrun restarts its workers,
each moves its earlier attempt's files to `attempts/<k>/` first, so the directory holds the last attempt and every
earlier one stays readable.
"""
from __future__ import annotations

import argparse
import faulthandler
import functools
import os
import shutil
import signal
import sys
import threading
import time

from sandbox import defaults, ending, rundir
from sandbox import rank as rank_runner
from sandbox import trace
from sandbox.trace import record, recorder



def keep_attempt(trace_dir: str, rank: int) -> str:
    """Move this rank's files of an earlier attempt to <trace_dir>/attempts/<k>/ (k = 0, 1, ...: the first where
    this rank has none yet; every rank restarts together, so attempt k holds the same run for all). Each rank moves
    only its own files, so workers starting at once never race. Returns the folder."""
    k = 0
    while os.path.exists(rundir.trace(rundir.attempt(trace_dir, k), rank)):
        k += 1
    dest = rundir.attempt(trace_dir, k)
    os.makedirs(dest, exist_ok=True)
    meta = os.path.join(trace_dir, rundir.META)
    if os.path.exists(meta) and not os.path.exists(os.path.join(dest, rundir.META)):
        shutil.copy(meta, dest)  # so `sandbox.diagnose attempts/<k>` reads it as any trace directory
    for name in rundir.RANK_FILES:
        src = os.path.join(trace_dir, name.format(r=rank))
        if os.path.exists(src):
            os.replace(src, os.path.join(dest, name.format(r=rank)))
    return dest


def _end_with(pid: int) -> None:
    """Under the sandbox's torchrun launcher: end this worker when the launcher is gone (SIGKILLed, it cannot end
    torchrun's workers, which run in sessions of their own)."""
    while True:
        time.sleep(0.5)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m sandbox.trace",
                                description="Run a script with every torch.distributed call traced (use under torchrun).")
    p.add_argument("--trace-dir", default="sandbox-traces", help="where each rank writes rank-<RANK>.jsonl")
    p.add_argument("--rank-log", action="store_true",
                   help="write the rank's stdout and stderr to rank-<RANK>.log in the trace directory")
    p.add_argument("-m", dest="module", action="store_true", help="run a module (like python -m) instead of a file")
    p.add_argument("target")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    os.makedirs(a.trace_dir, exist_ok=True)
    if os.path.exists(rundir.trace(a.trace_dir, rank)):
        keep_attempt(a.trace_dir, rank)  # torchrun restarted the workers: the trace dir holds the last attempt
    if a.rank_log:
        out = os.open(rundir.log(a.trace_dir, rank), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
    trace.install()
    armed = recorder.arm(a.trace_dir, rank)  # the Flight Recorder's dump beside the trace: fr-<RANK>.pkl
    watch = os.environ.get(defaults.WATCH_PID_ENV)
    if watch:  # started after arm: a thread inherits its mask, and SIGUSR2 is the recorder's
        threading.Thread(target=_end_with, args=(int(watch),), daemon=True).start()
    # torchrun ends its workers with SIGTERM: leave the Python stack behind first, even if blocked inside gloo.
    # Before the first trace line, as in a sandbox rank: the launcher asks a worker it has seen for its stack
    # (SIGUSR1), which would end one that had no handler yet
    stack = open(rundir.stack(a.trace_dir, rank), "w")
    faulthandler.register(signal.SIGUSR1, file=stack, all_threads=True)
    faulthandler.register(signal.SIGTERM, file=stack, all_threads=True, chain=True)
    # torchrun ends its workers one after another: a rank blocked on a peer ended before it sees its call fail and
    # leaves it before its own SIGTERM comes. Where it was stuck is where that call raised: its stack is left then
    record.on_error = functools.partial(faulthandler.dump_traceback, file=stack, all_threads=True)
    faulthandler.enable(file=sys.stderr)
    trace.start(rundir.trace(a.trace_dir, rank), rank,
                world_size=int(os.environ.get("WORLD_SIZE", "1")), local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                group_rank=os.environ.get("GROUP_RANK"),
                launcher="torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "?", flight=armed)
    target = ({"kind": "module", "name": a.target, "argv": a.args} if a.module else
              {"kind": "script", "path": a.target, "argv": a.args})
    return rank_runner.run_target({"target": target}, rank)


if __name__ == "__main__":
    ending.exit_now(main(sys.argv[1:]))  # as a sandbox rank ends: sandbox/ending.py says why
