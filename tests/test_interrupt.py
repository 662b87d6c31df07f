"""Ctrl-C at any stage of a run ends it within a second, leaves nothing behind and says "interrupted": before the
ranks start (the zygote is still importing torch), while the ranks run their own code, and while the sandbox takes
their stacks after a hang. From the CLI: exit 130 and the JSON verdict. From `launch`: `sandbox.Interrupted`
carrying the result, never a bare KeyboardInterrupt, also when the interrupt lands as the run ends.

Each interrupt is sent when a condition is seen (a process exists, the ranks left a note, a rank got the sandbox's
SIGUSR1), never after a guessed delay; the notes come from `scenarios_proc`."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback

import psutil
import pytest

import scenarios_proc
import sandbox
from conftest import ROOT, gone, still_running, wait_for
from sandbox import Interrupted, RunResult, launch

# The issue asks that an interrupt end everything within a second. What an interrupt has to do (end the process
# group, collect the exits, write the result, let the CLI exit) took about 0.1 s on this 2-core machine, so a
# second also leaves room for a loaded one; a run that waits for anything (the zygote's torch import, a stack
# window) takes longer.
INTERRUPT_S = 1.0
PROC = os.path.join(ROOT, "tests", "scenarios_proc.py")
SANDBOX_DIR = os.path.dirname(sandbox.__file__)


def _notes(notes, prefix):
    return scenarios_proc.read_notes(str(notes), prefix)


def _stacks_asked(notes):
    """A rank got SIGUSR1, the sandbox's request for its stack (see scenarios_proc.deaf_hang)."""
    return any(os.path.getsize(os.path.join(notes, n)) for n in os.listdir(notes) if n.startswith("usr1-"))


def _child_pids(notes):
    return [int(pid) for pid in _notes(notes, "child-").values()]


def _zygote(launcher, old, cpu_s: float = 0.0) -> bool:
    """The launcher has a new child process (the zygote; `old`: pids that were there before the run) which, with
    `cpu_s`, has exec'd (its command line is its own) and spent that much CPU time importing torch; no rank exists
    before that import is done."""
    try:
        me = psutil.Process(launcher)
        new = [c for c in me.children() if c.pid not in old]
        return any(not cpu_s or (c.cmdline() != me.cmdline() and c.cpu_times().user >= cpu_s) for c in new)
    except psutil.NoSuchProcess:  # a process ended while we looked: the next poll sees the state after it
        return False


# stage -> (rank program, condition(launcher pid, notes dir, pids of the launcher's children before the run) under
# which the run is at that stage, the ranks' outcomes after the interrupt)
STAGES = {
    # the zygote process was just created, the launcher may still be inside Popen
    "spawning": ("sleepy", lambda launcher, notes, old: _zygote(launcher, old), {"stopped"}),
    # the zygote imports torch (about 2 s of CPU here); the report: both ranks started and printed, and
    # the CLI exited 130 only 5.4-7.2 s later
    "importing": ("sleepy", lambda launcher, notes, old: _zygote(launcher, old, cpu_s=0.3),
                  {"stopped"}),
    "running": ("busy", lambda launcher, notes, old: len(_notes(notes, "running-")) == 2, {"stopped"}),
    "taking_stacks": ("deaf_hang", lambda launcher, notes, old: _stacks_asked(notes), {"hung"}),
}


def _check(stage, verdict: str, summary: str, outcomes: set, took: float, notes) -> None:
    """What an interrupted run must show, whether the CLI or `launch` ran it."""
    assert verdict == "interrupted", summary
    assert took < INTERRUPT_S, f"the run ended {took:.2f} s after Ctrl-C"
    if stage is not None:
        program, _, expected = STAGES[stage]
        assert outcomes == expected, summary
        if program == "sleepy":  # the ranks did not exist yet: none may start after the interrupt
            assert _notes(notes, "started-") == {}, "ranks started after Ctrl-C"
        else:
            assert len(_child_pids(notes)) == 2
            assert still_running(_child_pids(notes)) == [], "the ranks' children outlived the interrupted run"
    # it said "Interrupted. The 2.3456 s timeout passed with every rank inside ..." when no timeout had passed
    assert "timeout" not in summary, summary


@pytest.mark.parametrize("stage", list(STAGES))
def test_cli_interrupt(stage, tmp_path, clean):
    program, ready, _ = STAGES[stage]
    p = subprocess.Popen([sys.executable, "-m", "sandbox.run", "-n", "2", "--json", PROC, program, str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        wait_for(lambda: p.poll() is not None or ready(p.pid, tmp_path, ()), f"the run to reach the {stage} stage")
        assert p.poll() is None, p.communicate()
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if p.poll() is None:  # only when an assertion above failed: do not leave the CLI behind
            p.kill()
            p.communicate()
    assert p.returncode == 128 + signal.SIGINT, err
    d = json.loads(out)
    _check(stage, d["verdict"], d["diagnosis"]["summary"], {r["outcome"] for r in d["ranks"]}, took, tmp_path)


class _Interrupter(threading.Thread):
    """Raises KeyboardInterrupt in the main thread (SIGINT, as Ctrl-C does) once `ready()` holds and `delay`
    seconds more have passed, unless the run has returned by then."""

    def __init__(self, ready, delay: float = 0.0, timeout: float = 60):
        super().__init__(daemon=True)
        self.ready, self.delay, self.timeout = ready, delay, timeout
        self.returned = threading.Event()
        self.sent_at = None

    def run(self):
        deadline = time.monotonic() + self.timeout
        while not self.ready():
            if self.returned.is_set() or time.monotonic() > deadline:
                return
            time.sleep(0.001)
        if self.delay and self.returned.wait(self.delay):  # the delay is what a test varies, not a synchronisation
            return
        if not self.returned.is_set():
            self.sent_at = time.monotonic()
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


def _checkpoint():
    """A Python call: a pending KeyboardInterrupt is raised here at the latest."""


def _launch(fn, args, interrupter: _Interrupter):
    """launch(fn) while `interrupter` runs. Returns (result or None, Interrupted or None, seconds from the signal
    to launch giving up control). A KeyboardInterrupt that left launch bare fails the test."""
    interrupter.start()
    try:
        try:
            res = launch(fn, world_size=2, args=args, timeout=60, warm=False)  # the stages of a cold start
        finally:
            interrupter.returned.set()
            interrupter.join(timeout=10)
            _checkpoint()
        return res, None, None
    except Interrupted as e:
        return None, e, time.monotonic() - interrupter.sent_at
    except KeyboardInterrupt as e:
        inside = [f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in traceback.extract_tb(e.__traceback__)
                  if f.filename.startswith(SANDBOX_DIR + os.sep)]
        if inside:
            pytest.fail(f"a bare KeyboardInterrupt escaped from launch at {' / '.join(inside)}")
        return None, None, None  # it landed after launch had returned: not the sandbox's to catch


def _check_interrupted(e: Interrupted, took: float, stage=None, notes=None) -> None:
    res = e.result
    assert isinstance(res, RunResult), res
    _check(stage, res.verdict, res.diagnosis.summary, {r.outcome for r in res.ranks}, took, notes)


@pytest.mark.parametrize("stage", list(STAGES))
def test_launch_interrupt(stage, tmp_path, clean):
    program, ready, _ = STAGES[stage]
    me = os.getpid()
    old = {c.pid for c in psutil.Process(me).children()}
    res, e, took = _launch(getattr(scenarios_proc, program), (str(tmp_path),),
                           _Interrupter(lambda: ready(me, tmp_path, old)))
    assert e is not None, f"the run was not interrupted: {res and res.verdict}"
    _check_interrupted(e, took, stage, tmp_path)


def test_launch_interrupt_as_the_run_ends(tmp_path, clean):
    """Ctrl-C just after the ranks exit lands while launch collects their exits and writes the result: it must
    still come out as Interrupted. Interrupts sent 0-10 ms after both ranks are gone; a run that returned before
    its interrupt is not counted."""
    landed = []
    for i, delay in enumerate([0, 0.002, 0.005, 0.01, 0, 0.002]):
        notes = tmp_path / str(i)
        notes.mkdir()

        def ranks_gone():  # exited; their parent, the zygote, reaps them (this thread must not reap anything)
            pids = [int(p) for p in _notes(notes, "pid-").values()]
            return len(pids) == 2 and all(gone(p) for p in pids)

        res, e, took = _launch(scenarios_proc.pid_then_ok, (str(notes),), _Interrupter(ranks_gone, delay))
        if e is not None:
            _check_interrupted(e, took)
            landed.append(delay)
        if len(landed) >= 2:
            break
    assert landed, "no interrupt landed inside launch: the test did not test the end of a run"
