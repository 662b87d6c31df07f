"""A warm zygote per process (a Jupyter kernel uses one by default): later runs fork from it instead of importing
torch, each run is still isolated, functions typed into a cell travel by value, and nothing outlives the kernel."""
import os
import threading
import time

import psutil
import pytest

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


_USER = """
import os, sys, time
import psutil
import torch.distributed as dist
from sandbox import launch, warm

def where():  # the warm zygote this rank's run was forked by: its run's zygote's parent
    return psutil.Process(os.getppid()).ppid()

def stuck():
    if dist.get_rank() == 0:
        time.sleep(60)
    dist.barrier()

if sys.argv[1] == "where":
    res = launch(where, world_size=2, init=True, warm=True)
    print(res.verdict, res.values, warm.running())
else:
    launch(stuck, world_size=2, init=True, warm=True, timeout=60)
"""


def test_a_process_given_a_shared_warm_zygote_forks_its_runs_there_and_they_end_with_it(clean):
    """SANDBOX_WARM_SOCKET (`warm.share`: how the suite's lab kernels fork their runs from the worker's warm zygote
    instead of starting one each): the other process's runs are forked by that zygote, and each ends with the
    process that asked for it (SIGKILLed mid-run: nothing of its run is left, no process and no run directory);
    where the shared zygote has gone, the process starts its own."""
    import subprocess
    import sys

    from conftest import ROOT, shared_zygote, wait_for

    path = shared_zygote()
    env = dict(os.environ, SANDBOX_WARM_SOCKET=path)
    p = subprocess.run([sys.executable, "-c", _USER, "where"], env=env, capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert p.stdout.split() == ["ok", f"[{warm.running()},", f"{warm.running()}]", "None"], p.stdout + p.stderr

    user = subprocess.Popen([sys.executable, "-c", _USER, "stuck"], env=env, stdout=subprocess.DEVNULL, cwd=ROOT)
    try:
        zygote = psutil.Process(warm.running())

        def running():  # the user's run, once both its ranks are forked
            runs = [c for c in zygote.children() if "--warm-sibling" not in c.cmdline()]
            return runs if len(runs) == 1 and len(runs[0].children()) == 2 else None
        runs = wait_for(running, "the user's run under the shared zygote")
        user.kill()
        user.wait(10)
        assert psutil.wait_procs(runs, timeout=5)[1] == [], "the run outlived the process that asked for it"
    finally:
        user.kill()

    warm.shutdown()  # the socket now names nothing: the process starts a warm zygote of its own
    p = subprocess.run([sys.executable, "-c", _USER, "where"], env=env, capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    own = p.stdout.split()[-1]
    assert p.stdout.split() == ["ok", f"[{own},", f"{own}]", own] and own != str(zygote.pid), p.stdout + p.stderr


def _hash_of_a_string():
    return hash("encoder.weight")


def test_a_warm_zygote_started_with_one_seed_serves_a_run_that_asks_for_two(clean, monkeypatch):
    """A warm zygote starts a sibling zygote per further string-hash seed its process chose; a later run that asks
    for more (its environment changed: the suite's modules on hash order) gets them from siblings started then, and
    kept, not from a restart of the warm zygote."""
    warm.shutdown()
    monkeypatch.setenv("SANDBOX_HASH_SEEDS", "1")
    try:
        one = launch(_hash_of_a_string, world_size=4, warm=True)
        pid = warm.running()
        monkeypatch.delenv("SANDBOX_HASH_SEEDS")  # the product's two
        two = launch(_hash_of_a_string, world_size=4, warm=True)
        again = launch(_hash_of_a_string, world_size=4, warm=True)
        assert warm.running() == pid
    finally:
        warm.shutdown()
    assert len(set(one.values)) == 1, one.values
    for res in (two, again):  # rank r in zygote r % 2
        v = res.values
        assert v[0] == v[2] and v[1] == v[3] and v[0] != v[1], v


def _huge_kb(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return sum(int(line.split()[1]) for line in f if line.startswith("AnonHugePages:"))


# Can this kernel collapse an anonymous range into a huge page? 8 MiB mapped, touched, its middle 2 MiB collapsed.
COLLAPSE_PROBE = """
import ctypes, mmap
m = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
m.write(b"x" * (8 << 20))
libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
base = ctypes.addressof(ctypes.c_char.from_buffer(m))
start = -(-base // (2 << 20)) * (2 << 20)
raise SystemExit(libc.madvise(start, 2 << 20, 25) != 0)  # MADV_COLLAPSE
"""


def test_a_warm_zygote_puts_its_memory_in_huge_pages_when_idle_and_not_when_told(clean, monkeypatch):
    """Idle after a run, a warm zygote backs its heap with 2 MiB pages (sandbox._proc.huge_pages): every later fork
    copies one page-table entry per huge page, not 512 (benchmarks/huge_pages.py measures a run's CPU with and
    without). SANDBOX_HUGE_PAGES=0 leaves the pages as they are. Where the kernel cannot collapse pages into huge
    ones (MADV_COLLAPSE, Linux 6.1+) there is nothing to see: skipped."""
    import subprocess
    import sys

    probe = subprocess.run([sys.executable, "-c", COLLAPSE_PROBE], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"this kernel does not collapse pages into huge ones (MADV_COLLAPSE, Linux 6.1+): {probe.stderr}")
    try:  # where every anonymous range may get huge pages anyway, the zygote's own say shows only when on
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            always = "[always]" in f.read()
    except OSError:
        always = False
    for on in ((True,) if always else (True, False)):
        warm.shutdown()
        monkeypatch.setenv("SANDBOX_HUGE_PAGES", "1" if on else "0")
        try:
            assert launch(_counter, world_size=2, warm=True).values == [1, 1]
            pid = warm.running()
            deadline = time.monotonic() + 30
            while _huge_kb(pid) == 0 and time.monotonic() < deadline and on:
                time.sleep(0.05)
            if not on:
                time.sleep(1.0)  # what it would have done by now (0.35 s on 2 cores), it did not
            huge = _huge_kb(pid)
            assert (huge > 16 * 1024) if on else huge == 0, (on, huge)
            assert launch(_counter, world_size=3, warm=True).values == [1, 1, 1]  # forked from those pages
        finally:
            warm.shutdown()


_PYTEST_SEEN = "import sys\n\n\ndef seen():\n    return 'pytest' in sys.modules\n"


def test_a_warm_zygote_imports_when_idle_the_libraries_a_run_imported(clean, tmp_path, monkeypatch):
    """A function launched from a module that imports pytest (a test module, the pytest plugin's way) made its run's
    zygote import pytest each time. Once such a run has been asked for, the warm zygote imports pytest when idle
    (sandbox.preload.LIBRARIES), so the runs after fork with it in place; until then it does not."""
    (tmp_path / "plain_mod.py").write_text(_PYTEST_SEEN)
    (tmp_path / "tested_mod.py").write_text("import pytest  # noqa: F401\n" + _PYTEST_SEEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    import plain_mod
    import tested_mod

    warm.shutdown()
    try:
        assert launch(plain_mod.seen, world_size=2, warm=True).values == [False, False]
        time.sleep(0.5)  # idle: what it imports whatever the run, it has imported by now
        assert launch(plain_mod.seen, world_size=2, warm=True).values == [False, False]
        assert launch(tested_mod.seen, world_size=2, warm=True).values == [True, True]  # its own import
        deadline = time.monotonic() + 30
        while launch(plain_mod.seen, world_size=2, warm=True).values != [True, True]:
            assert time.monotonic() < deadline, "the warm zygote did not import pytest once idle"
            time.sleep(0.2)
    finally:
        warm.shutdown()
