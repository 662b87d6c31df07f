"""A warm zygote per process (a Jupyter kernel uses one by default): later runs fork from it instead of importing
torch, each run is still isolated, functions typed into a cell travel by value, and nothing outlives the kernel."""
import os
import threading
import time

import psutil

import scenarios
from conftest import leftovers, run_in_kernel
from sandbox import launch, warm


def _counter():
    # a module-level value changed by one run must not be seen by the next: every run is a fresh fork
    scenarios.RUNS = getattr(scenarios, "RUNS", 0) + 1
    return scenarios.RUNS


def test_warm_runs_are_isolated_and_take_functions_by_value(clean):
    try:
        first = launch(_counter, world_size=2, warm=True)
        pid = warm.running()
        assert pid is not None
        second = launch(_counter, world_size=2, warm=True)
        assert first.values == second.values == [1, 1]
        assert warm.running() == pid  # the same warm zygote served both
        assert first.pgid != second.pgid and first.pgid != pid  # each run its own zygote and process group
        scale = 3
        res = launch(lambda: int(os.environ["RANK"]) * scale, world_size=3, warm=True)  # a closure, by value
        assert res.values == [0, 3, 6]
        hang = launch(scenarios.send_cycle, world_size=2, warm=True)
        assert (hang.verdict, hang.diagnosis.kind) == ("hang", "p2p_cycle")
        assert [r.exit_code for r in hang.ranks] == [-9, -9]
    finally:
        warm.shutdown()
    assert warm.running() is None


def test_a_warm_zygote_started_from_a_thread_that_ended_serves_the_next_run(clean):
    """Linux sends a process's death signal (PR_SET_PDEATHSIG) when the *thread* that started it ends: a warm zygote
    started by a launch() in a worker thread died with that thread, and the next warm run found its socket reset
    (ConnectionResetError). Each run here is launched from a thread that ends before the next starts."""
    warm.shutdown()
    got = []
    try:
        for _ in range(2):
            t = threading.Thread(target=lambda: got.append(launch(_counter, world_size=2, warm=True)))
            t.start()
            t.join(120)
            assert got and warm.running() is not None, "the run did not come back, or its warm zygote died"
        assert [r.values for r in got] == [[1, 1], [1, 1]]
    finally:
        warm.shutdown()


def test_warm_zygote_dies_with_the_kernel(clean):
    text = run_in_kernel(
        "import time, scenarios\nfrom sandbox import launch, warm\n"
        "def typed_here():\n    import os\n    return int(os.environ['RANK']) + 100\n"
        "times = []\n"
        "for _ in range(3):\n"
        "    t = time.monotonic(); res = launch(typed_here, world_size=4); times.append(time.monotonic() - t)\n"
        "print(res.verdict, res.values, warm.running(), ' '.join(f'{x:.2f}' for x in times))").split()
    assert text[:5] == ["ok", "[100,", "101,", "102,", "103]"], text
    pid = int(text[5])  # the kernel's warm zygote, now that the kernel is gone
    deadline = time.monotonic() + 5
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        leftovers(grace=0)  # reaps what was re-parented to this test process
        time.sleep(0.05)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _has_preload():
    import sys
    return "".join(["torch.", "_dyn", "amo"]) in sys.modules  # in pieces: written out, it would ask for the preload


def test_a_warm_zygote_preloads_when_idle_once_a_run_needed_it(clean, monkeypatch):
    """`preload.PRELOAD` is imported by a warm zygote only once one of its runs needed it (its code names an
    optimizer, DDP, ...: `preload.needed`); from then on later runs fork with it in place, whatever they run: the
    warm zygote imported it while idle. The plain function goes by value and names the module in pieces, so nothing
    in it asks for the preload: before the run that needs it, none of its runs has it; after, all do."""
    from sandbox import preload

    assert preload.PRELOAD == ("torch._dynamo",)
    monkeypatch.setenv(preload.PRELOAD_ENV, "1")  # the warm zygote, started below, inherits it
    warm.shutdown()  # one started earlier may have preloaded already
    fn = lambda: _has_preload()  # noqa: E731  a lambda travels by value
    needs = lambda: (__import__("torch").optim is not None) and _has_preload()  # noqa: E731  names `optim`
    try:
        first = launch(fn, world_size=2, warm=True)
        second = launch(fn, world_size=2, warm=True)  # the warm zygote was idle between: no run had needed it
        needing = launch(needs, world_size=2, warm=True)  # its own zygote imports it before the fork
        later = launch(fn, world_size=2, warm=True)
        assert first.values == [False, False], first.diagnosis.summary
        assert second.values == [False, False], second.diagnosis.summary
        assert needing.values == [True, True], needing.diagnosis.summary
        assert later.values == [True, True], later.diagnosis.summary
    finally:
        warm.shutdown()
