"""The one run lifecycle (`sandbox._run.lifecycle`) over its two ways of starting processes: what it asks of live
ranks waits for their files, with a bound, not for a fixed time (the torchrun launcher slept 1 s for stacks); the
same user error reads the same under both launchers; both backends are the same lifecycle. The real runs under
torchrun that show the rest (a deadlock confirmed, a timeout's workers stopped with their stacks) are in
tests/test_torchrun_nodes.py."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from sandbox import agents, launcher, rundir
from sandbox._run import asks, lifecycle, procs
from sandbox._run.options import UsageError
from sandbox._run.zygote import ZygoteProcs
from sandbox.events import RankTrack

# a process that dumps its stack into the file given when it gets SIGUSR1, as a rank's faulthandler does
DUMPER = """
import faulthandler, signal, sys, time
f = open(sys.argv[1], "w")
faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)
def waiting_here():
    print("ready", flush=True)
    time.sleep(60)
waiting_here()
"""


@pytest.fixture
def dumper(tmp_path):
    started = []

    def start(rank: int) -> RankTrack:
        p = subprocess.Popen([sys.executable, "-c", DUMPER, rundir.stack(str(tmp_path), rank)],
                             stdout=subprocess.PIPE, text=True)
        started.append(p)
        assert p.stdout.readline().strip() == "ready"
        t = RankTrack(rank)
        t.feed({"ev": "hello", "rank": rank, "pid": p.pid, "t": 0.0})  # known by its trace, as torchrun's workers
        return t
    yield start
    for p in started:
        p.kill()
        p.wait(timeout=10)


class _Life:
    def __init__(self, d):
        self.dir, self.n = d, 2


def test_a_stack_request_ends_when_the_dumps_are_written_not_after_a_fixed_time(tmp_path, dumper):
    ranks = [dumper(0), dumper(1)]
    asked = procs.Procs(_Life(str(tmp_path))).signal(ranks, signal.SIGUSR1)
    assert asked == [0, 1]
    t0 = time.monotonic()
    assert asks.await_stacks(str(tmp_path), asked, {}, wait=60.0)
    assert time.monotonic() - t0 < 60.0  # it returned when the files were there, long before its bound
    for r in (0, 1):
        assert "waiting_here" in asks.read_stack(str(tmp_path), r, None)


def test_a_second_request_waits_for_a_new_dump_and_the_report_reads_the_last_one(tmp_path, dumper):
    t = dumper(0)
    p = procs.Procs(_Life(str(tmp_path)))
    p.signal([t], signal.SIGUSR1)
    assert asks.await_stacks(str(tmp_path), [0], {}, wait=60.0)
    marks = asks.stack_marks(str(tmp_path), [0])
    first = open(rundir.stack(str(tmp_path), 0)).read()
    assert not asks.await_stacks(str(tmp_path), [0], marks, wait=0.2)  # nothing new yet: the twin, at its bound
    p.signal([t], signal.SIGUSR1)
    assert asks.await_stacks(str(tmp_path), [0], marks, wait=60.0)
    last = asks.read_stack(str(tmp_path), 0, marks[0])
    assert "waiting_here" in last and len(last) < len(open(rundir.stack(str(tmp_path), 0)).read())
    assert open(rundir.stack(str(tmp_path), 0)).read().startswith(first)


def test_a_rank_without_a_pid_or_gone_is_not_waited_for(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    t = RankTrack(1)
    t.feed({"ev": "hello", "rank": 1, "pid": gone.pid, "t": 0.0})
    assert procs.Procs(_Life(str(tmp_path))).signal([RankTrack(0), t], signal.SIGUSR1) == []
    assert asks.await_stacks(str(tmp_path), [], {}, wait=60.0)


def test_a_flight_request_waits_for_a_replaced_dump(tmp_path):
    path = rundir.flight(str(tmp_path), 3)
    with open(path, "wb") as f:
        f.write(b"old")
    before = asks.flight_stamps(str(tmp_path), [3])
    assert not asks.await_flight(str(tmp_path), before, 0.1)
    with open(path + ".tmp", "wb") as f:  # the recorder writes a dump whole, then renames it into place
        f.write(b"new")
    os.replace(path + ".tmp", path)
    assert asks.await_flight(str(tmp_path), before, 60.0)


@pytest.fixture
def ended(tmp_path):
    """A rank whose process has ended and is not reaped yet (a zombie), as a rank that failed is while its zygote
    has still to say so: its track, and the Procs that knows it."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # ended; left unreaped
    t = RankTrack(1)
    t.feed({"ev": "hello", "rank": 1, "pid": p.pid, "t": 0.0})

    class Known(procs.Procs):
        def tracks(self, parse=True):
            return self.known

    known = Known(_Life(str(tmp_path)))
    known.known = {1: t}
    yield t, known
    p.wait(timeout=30)


class _Bound:
    """A cut_short that says "give up" at its `after`-th look: whether a wait reached it tells, without a clock,
    whether it would have run out its bound."""

    def __init__(self, after: int):
        self.looks, self.after = 0, after

    def __call__(self) -> bool:
        self.looks += 1
        return self.looks >= self.after

    @property
    def reached(self) -> bool:
        return self.looks >= self.after


def test_a_rank_that_ended_is_gone_and_a_flight_request_does_not_wait_for_it(tmp_path, ended):
    t, known = ended
    assert known.gone(1) and not known.gone(0)  # a rank without a known process is not taken for gone
    assert known.signal([t], signal.SIGUSR2) == [1]  # a zombie takes the signal, and will never answer it
    before = asks.flight_stamps(str(tmp_path), [1])
    bound = _Bound(100)
    assert asks.await_flight(str(tmp_path), before, 60.0, cut_short=bound, gone=known.gone) == set()
    assert bound.looks == 0  # the first look saw it gone
    bound = _Bound(3)  # the wait as it was: for a dump that never comes, to its bound
    assert asks.await_flight(str(tmp_path), before, 60.0, cut_short=bound) == set() and bound.reached


def test_a_stack_request_waits_for_the_live_ranks_not_for_one_that_ended_without_a_stack(tmp_path, dumper, ended):
    t, known = ended
    live = dumper(0)
    known.known[0] = live
    asked = known.signal([live, t], signal.SIGUSR1)
    assert asked == [0, 1]
    bound = _Bound(500)
    assert not asks.await_stacks(str(tmp_path), asked, {}, 60.0, cut_short=bound, gone=known.gone)  # not all came
    assert not bound.reached and "waiting_here" in asks.read_stack(str(tmp_path), 0, None)
    bound = _Bound(3)
    assert not asks.await_stacks(str(tmp_path), asked, {}, 60.0, cut_short=bound) and bound.reached


def test_a_stack_written_by_a_rank_before_it_ended_counts(tmp_path, ended):
    t, known = ended
    with open(rundir.stack(str(tmp_path), 1), "w") as f:
        f.write("Thread 0x1 (most recent call first):\n  File \"job.py\", line 3 in main\n")
    bound = _Bound(500)
    assert asks.await_stacks(str(tmp_path), [1], {}, 60.0, cut_short=bound, gone=known.gone) and not bound.reached


def test_both_launchers_are_the_one_lifecycle():
    assert issubclass(launcher.Run, lifecycle.Lifecycle) and issubclass(agents.AgentsRun, lifecycle.Lifecycle)
    assert issubclass(agents.TorchrunProcs, procs.Procs)
    for name in ("start", "poll", "over", "tracks", "end", "close", "final"):  # what each backend must say itself
        assert name in vars(agents.TorchrunProcs) and name in vars(ZygoteProcs), name


def test_a_missing_script_is_one_sentence_under_either_launcher(tmp_path):
    missing = str(tmp_path / "train.py")
    with pytest.raises(UsageError) as ours:
        launcher.run_script(missing, world_size=2)
    with pytest.raises(UsageError) as theirs:
        agents.run_script(missing, nnodes=2, nproc_per_node=1)
    assert str(ours.value) == str(theirs.value) == f"no such script: {missing}"
