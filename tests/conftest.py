import ctypes
import os
import subprocess
import sys
import tempfile

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/scenarios.py is importable by the ranks

# Adopt orphans: if a run of ours leaked a process whose parent died, it is re-parented to this pytest process
# (not to init), so `leftovers()` finds it by parentage.
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER

# Runs of this test session make their temp dirs here, so the leftovers check sees only ours.
_TMP = tempfile.mkdtemp(prefix="sandbox-tests-")
os.environ["TMPDIR"] = _TMP
tempfile.tempdir = _TMP


def pytest_sessionfinish(session, exitstatus):
    import shutil
    shutil.rmtree(_TMP, ignore_errors=True)


def python() -> str:
    return sys.executable


def run_cli(*args, timeout=120, env=None, **kw):
    """Run `python -m <args>` from the project root; a bounded wait."""
    e = dict(os.environ, **(env or {}))
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [(env or {}).get("PYTHONPATH"), ROOT, os.path.join(ROOT, "tests")]))
    return subprocess.run([python(), "-m", *args], capture_output=True, text=True, timeout=timeout, cwd=kw.pop("cwd", ROOT),
                          env=e, **kw)


def sandbox_dirs() -> set:
    d = tempfile.gettempdir()
    return {n for n in os.listdir(d) if n.startswith("sandbox-run-")}


def leftovers() -> list:
    """Processes descended from this test process (ranks, zygotes, CLIs), zombies reaped first."""
    me = psutil.Process()
    out = []
    for c in me.children(recursive=True):
        try:
            if c.status() == psutil.STATUS_ZOMBIE:
                try:
                    os.waitpid(c.pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                continue
            out.append(f"{c.pid} pgid={os.getpgid(c.pid)} {' '.join(c.cmdline())[:120]}")
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
    return out


def listening_ports() -> set:
    """Ports that this test process or any of its descendants listen on."""
    me = psutil.Process()
    ours = {me.pid} | {c.pid for c in me.children(recursive=True)}
    return {c.laddr.port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN and c.pid in ours}


def port_is_listening(port: int) -> bool:
    return any(c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in psutil.net_connections("tcp"))


def assert_group_gone(pgid: int) -> None:
    import time
    deadline = time.monotonic() + 2  # SIGKILL is delivered asynchronously; zombies re-parented here are reaped
    while time.monotonic() < deadline:
        leftovers()
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    raise AssertionError(f"process group {pgid} of a finished run still has members")


@pytest.fixture
def clean():
    """Checks after the test that no process, temp dir or listening socket of ours is left."""
    dirs = sandbox_dirs()
    yield
    assert leftovers() == []
    assert sandbox_dirs() - dirs == set()
    assert listening_ports() == set()
