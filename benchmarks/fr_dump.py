"""Flight Recorder dumps from a plain torchrun job on gloo: wrap the script, change nothing else.

    FR_DUMP_DIR=dumps/ torchrun --nproc-per-node 4 benchmarks/fr_dump.py train.py --lr 0.1
    torchfrtrace dumps/ --prefix nccl_trace_rank_
    python -m sandbox.diagnose dumps/ --prefix nccl_trace_rank_

Why a runner. PyTorch's Flight Recorder records every collective of every process group, gloo included, once
TORCH_FR_BUFFER_SIZE is set. On NCCL torch writes the dumps itself when its watchdog times out
(TORCH_NCCL_DUMP_ON_TIMEOUT=1). On gloo nothing ever writes them: a job has to call
`torch._C._distributed_c10d._dump_fr_trace()` and save the bytes, and it has to do so while it is stuck, because a
rank blocked inside a gloo collective never comes back to Python, and torchrun's SIGTERM then ends it without running
any Python handler. So a daemon thread rewrites the rank's dump every FR_DUMP_INTERVAL_S (0.5 s) while the script
runs, and the runner writes it once more when the script ends (returns, raises or calls sys.exit). A killed rank
leaves a dump at most one interval old.

The first dump that holds an entry is slow in a fresh process: turning the recorded Python frames into file:line
took 2.1-3.4 s the first time on a quiet machine, up to 5.5 s under load (torch 2.13 CPU), then well under a
millisecond. The time is an import: the symbolizer asks torch._inductor.codecache.PyCodeCache about frames of
compiled code, and the first ask imports torch._inductor. A rank that fails right after its collective (torchrun
SIGTERMs every rank within ~0.1 s of the first failure) would be killed before that first dump was written. So the
runner pays it once, in the main thread, before the script starts (`Dumper.warm`).

A rank that has made all its collectives can still be killed before its script ends: `destroy_process_group()` may
wait for a peer that is stuck, and torchrun SIGTERMs it when another rank fails. So the runner also writes the dump
as `destroy_process_group` is entered (a wrapper that then calls torch's own, unchanged). Both that write and the last
one wait, at most SETTLE_S, for the recorder to mark the rank's finished collectives completed (see SETTLE_S), and no
write replaces a dump with one that is behind it (`behind`).

Where: `$TORCH_FR_DUMP_TEMP_FILE<RANK>` when that is set (torch's own variable for NCCL's dump prefix, so both
back-ends put their dumps in one place); else `$FR_DUMP_DIR/nccl_trace_rank_<RANK>`; else
`./nccl_trace_rank_<RANK>` in the working directory. Each write goes to a temporary file in the same directory whose
name does not contain the prefix (the readers take every file holding it), then `os.replace`, so a reader never sees
half a dump.

What it changes: nothing of the script's behaviour. It runs as `__main__` through runpy with sys.argv and sys.path[0]
as `python SCRIPT` would set them, and its exit code and exception are the script's. It sets TORCH_FR_BUFFER_SIZE to
2000 only when the job did not set it (without it the recorder is off and every dump is empty), before torch is
imported. Nothing of dist-sandbox runs in the ranks. On NCCL with TORCH_NCCL_DUMP_ON_TIMEOUT=1 torch's own dump and
this runner's write the same file; whichever comes last stays (both hold the same recorder's entries).
Imports only torch and the standard library: it must run where nothing else is installed.

Two knobs for NCCL (benchmarks/flight_anchor.py --gpu uses both): FR_PG_TIMEOUT_S=S gives every process group the
script creates without a timeout one of S seconds, so NCCL's watchdog fires and writes torch's own dump in seconds
rather than after its default 10 minutes; FR_DUMP_OWN=0 leaves the dumps to torch (no thread, no writes here).

What it cannot do: a rank that gloo aborts (SIGABRT, e.g. "Received data size doesn't match expected size") dies in
C++ within milliseconds of its collective, so its dump is the last periodic one, usually from before that call.
And what the recorder does not hold no dump holds: on gloo (torch 2.13) it has no entry for send/recv/isend/irecv,
new_group or init_process_group.
"""
from __future__ import annotations

import os
import runpy
import sys
import threading

PREFIX = "nccl_trace_rank_"  # torch's name for NCCL dumps, the default prefix of torchfrtrace and sandbox.diagnose
INTERVAL_S = float(os.environ.get("FR_DUMP_INTERVAL_S", "0.5"))
# How long a deliberate dump (at destroy_process_group, at the script's end) waits for the recorder to catch up.
# On gloo a call's entry is retired by the group's worker thread just after the caller's wait returns: in a 2-rank
# loop of synchronous all_reduces, 15 of 120 dumps taken at once still showed the last one not retired, each caught
# up within about 2 ms, under load too (torch 2.13 CPU). A dump taken in that window made a correct job read as hung
# in its last collective. The wait is per entry (`settled`), counted from the first dump's return, and ends as soon
# as every entry is retired; it runs out only where a call is really unfinished (an async one never waited).
SETTLE_S = 2.0


def dump_path(environ=os.environ) -> str:
    """Where this rank's dump goes (see the module docstring for the order)."""
    prefix = environ.get("TORCH_FR_DUMP_TEMP_FILE") or os.path.join(environ.get("FR_DUMP_DIR") or os.getcwd(), PREFIX)
    return prefix + environ.get("RANK", "0")  # outside torchrun: one process, rank 0


def progress(data: bytes) -> dict:
    """How far a dump has come: its number of entries and of retired ones, and per group (enqueued, completed)
    collectives."""
    import pickle

    doc = pickle.loads(data)
    entries = doc.get("entries") or ()
    return {"entries": len(entries), "retired": sum(e.get("retired") is True for e in entries),
            "groups": {g: (s.get("last_enqueued_collective", -1), s.get("last_completed_collective", -1))
                       for g, s in (doc.get("pg_status") or {}).items()}}


def behind(new: dict, old: dict) -> bool:
    """Is a dump of progress `new` behind one of progress `old`: no more entries, none more retired, no group further
    on, and some less? Such a dump is never written over the other. It is an older snapshot that reached the lock late
    (the thread's, after a deliberate write), or a count gone back: after destroy_process_group a gloo group's
    completed count was seen at 7 where the dump taken as destroy began had it at 8 of 8 (torch 2.13 CPU, 1 run in
    about 20 under load; the count is not monotonic, see `settled`)."""
    if new == old or new["entries"] > old["entries"] or new.get("retired", 0) > old.get("retired", 0):
        return False
    for g, (enqueued, completed) in new["groups"].items():
        if g not in old["groups"]:
            return False
        if enqueued > old["groups"][g][0] or completed > old["groups"][g][1]:
            return False
    return True


def settled(data: bytes) -> bool:
    """Has the recorder retired every call of this dump? Per entry: a group's `last_completed_collective` can stay
    behind for good on gloo, whose two worker threads each write it after their call, so one that runs late puts back
    a number a later call had already written (torch's ProcessGroupGloo::runLoop; 9 times in 2000 calls under load)."""
    import pickle

    return all(e.get("retired") is True or e.get("state") == "completed"
               for e in pickle.loads(data).get("entries") or ())


class Dumper:
    """Writes the recorder's dump to `path`, now (`write`) and every `interval_s` from a daemon thread (`start`,
    `stop`). A write whose bytes equal the last one is skipped, so the file's mtime says when the rank last moved;
    so is one `behind` the dump already written."""

    def __init__(self, *, path: str, interval_s: float = INTERVAL_S):
        self.path, self.interval_s = path, interval_s
        self._last: bytes | None = None
        self._written: dict | None = None  # the progress (`progress`) of the dump last written
        self._lock = threading.Lock()  # the thread and the final write must not share the temporary file at once
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fr_dump", daemon=True)

    def write(self, settle: bool = False) -> None:
        """Write the dump now; `settle`: first let the recorder retire every call it holds (at most SETTLE_S), for
        the dumps written where the rank is not inside a collective (see SETTLE_S)."""
        # the snapshot outside the lock (the dump may import torch._inductor the first time: never under our lock);
        # the last write comes after the thread is joined (`stop`), so no older snapshot lands after it
        data = self._snapshot(SETTLE_S if settle else 0.0)
        now = progress(data)
        with self._lock:
            if data == self._last or (self._written is not None and behind(now, self._written)):
                return
            d = os.path.dirname(self.path) or "."
            os.makedirs(d, exist_ok=True)
            tmp = os.path.join(d, f".fr_dump_tmp_{os.getpid()}")  # no prefix in the name: readers would take it
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path)
            self._last, self._written = data, now

    @staticmethod
    def _snapshot(settle_s: float) -> bytes:
        import time

        import torch

        deadline = None  # counted from the first dump's return: a dump itself can take longer than settle_s under
        while True:      # load, and one that starts the wait must not also end it with what it saw before
            data = torch._C._distributed_c10d._dump_fr_trace()
            if settled(data):
                return data
            deadline = time.monotonic() + settle_s if deadline is None else deadline
            if time.monotonic() >= deadline:
                return data
            time.sleep(0.001)

    def warm(self) -> None:
        """Symbolize one Python traceback now, so the recorder's first real dump is fast (see the docstring)."""
        import torch.distributed  # noqa: F401  here, in the main thread: importing torch from two threads at once aborts
        from torch._C._profiler import gather_traceback, symbolize_tracebacks

        symbolize_tracebacks([gather_traceback(True, True, False)])  # python, script, no C++: what the recorder keeps

    def start(self) -> None:
        self._thread.start()

    def before_destroy(self) -> None:
        """Write the dump whenever the script calls destroy_process_group, then call torch's own."""
        import functools

        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        original = c10d.destroy_process_group

        @functools.wraps(original)
        def destroy_process_group(*args, **kwargs):
            try:
                self.write(settle=True)
            except Exception as e:  # noqa: BLE001  the script's teardown matters more than this dump: report, go on
                print(f"fr_dump: cannot write {self.path}: {e}", file=sys.stderr, flush=True)
            return original(*args, **kwargs)

        dist.destroy_process_group = c10d.destroy_process_group = destroy_process_group

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5 * self.interval_s + 1)  # a dump takes milliseconds; never hang the exit on it

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.write()
            except Exception as e:  # noqa: BLE001  a full disk or a torch without the recorder: say so, retry later
                print(f"fr_dump: cannot write {self.path}: {e}", file=sys.stderr, flush=True)
                self._stop.wait(10 * self.interval_s)


def _usage(msg: str) -> int:
    print(f"fr_dump: {msg}\nusage: torchrun [torchrun options] benchmarks/fr_dump.py SCRIPT [args...] "
          "(or -m MODULE [args...])", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    if not argv:
        return _usage("name the script to run.")
    if argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    module = argv[0] == "-m"
    if module and len(argv) < 2:
        return _usage("-m needs a module name.")
    target = argv[1] if module else argv[0]
    if not module and not os.path.isfile(target):
        return _usage(f"{target} is not a file.")
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")  # read when c10d makes its recorder: before torch loads
    _pg_timeout(os.environ.get("FR_PG_TIMEOUT_S"))
    dumper = Dumper(path=dump_path())
    if os.environ.get("FR_DUMP_OWN", "1") != "0":  # FR_DUMP_OWN=0: NCCL's watchdog writes the dumps, not this runner
        dumper.warm()
        dumper.before_destroy()
        dumper.start()
    try:
        if module:
            sys.argv = [target, *argv[2:]]  # run_module puts the module's file in sys.argv[0], as `python -m` does
            sys.path[0] = os.getcwd()  # what `python -m` puts first
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [target, *argv[1:]]
            sys.path[0] = os.path.dirname(os.path.realpath(target))  # what `python SCRIPT` puts first, not benchmarks/
            runpy.run_path(target, run_name="__main__")
    finally:  # ok, exception or sys.exit: the script's own outcome goes on unchanged after the last dump
        if os.environ.get("FR_DUMP_OWN", "1") != "0":
            dumper.stop()
            try:
                dumper.write(settle=True)
            except Exception as e:  # noqa: BLE001  the script's outcome matters more than its last dump: go on
                print(f"fr_dump: cannot write {dumper.path}: {e}", file=sys.stderr, flush=True)
    return 0


def _pg_timeout(seconds: str | None) -> None:
    """FR_PG_TIMEOUT_S=S: every process group the script creates without a timeout gets one of S seconds, so NCCL's
    watchdog fires (and with TORCH_NCCL_DUMP_ON_TIMEOUT=1 writes its dump) in seconds, not after its 10 minutes."""
    if not seconds:
        return
    import datetime
    import functools

    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    original = c10d.init_process_group

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        kwargs.setdefault("timeout", datetime.timedelta(seconds=float(seconds)))
        return original(*args, **kwargs)

    dist.init_process_group = c10d.init_process_group = init_process_group


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
