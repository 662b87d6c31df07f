"""Nothing is left behind, whatever happens: 30+ mixed runs (ok, hang, crash, error, Ctrl-C of the CLI, SIGTERM
to the parent) and then no process of ours (found by parentage: this test process is a subreaper, and by the
runs' process groups), no listening socket, no temp dir. And 8 CLI runs started at once all pass."""
import json
import os
import signal
import subprocess
import sys
import time

import psutil

import scenarios
from conftest import ROOT, assert_group_gone, leftovers, listening_ports, port_is_listening, run_cli, sandbox_dirs
from sandbox import launch

EX = os.path.join(ROOT, "examples")


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.Popen([sys.executable, "-m", "sandbox.run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)


def _wait_until_blocked(proc, n, timeout=30):
    """Wait until the CLI's run has n ranks (its zygote's children), so a signal lands mid-run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = psutil.Process(proc.pid).children(recursive=True)
        if sum(1 for k in kids if k.ppid() != proc.pid) >= n:
            return [k.pid for k in kids]
        time.sleep(0.05)
    raise AssertionError("the run never started its ranks")


def _interrupt(sig):
    p = _cli("-n", "3", "--json", "--hang-after", "30", os.path.join(EX, "mismatch.py"))
    pids = _wait_until_blocked(p, 3)
    time.sleep(0.3)
    # while the run is up: every socket it listens on (store, gloo pairs) is bound to loopback only
    listening = [c.laddr for c in psutil.net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN and c.pid in pids]
    assert listening and all(a.ip == "127.0.0.1" for a in listening), listening
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 128 + sig, err
    d = json.loads(out)
    assert d["verdict"] == "interrupted"
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    return d


def test_thirty_mixed_runs_leave_nothing():
    dirs, t0 = sandbox_dirs(), time.monotonic()
    kinds = [scenarios.ok_sum, scenarios.op_mismatch, scenarios.crash_in_call, scenarios.raises,
             scenarios.send_cycle, scenarios.exits_early]
    seen = []
    for i in range(24):
        fn = kinds[i % len(kinds)]
        res = launch(fn, world_size=2 if fn is scenarios.send_cycle else 3, timeout=30)
        seen.append(res.verdict)
        ports = {int(e["MASTER_PORT"]) for e in res.events if e.get("op") == "init_process_group" and e.get("MASTER_PORT")}
        assert ports, "every run rendezvoused through its own store"
        for port in ports:
            assert not port_is_listening(port), f"run {i}: the store port {port} is still open"
        assert_group_gone(res.pgid)
        for r in res.ranks:
            assert r.pid and not psutil.pid_exists(r.pid), f"run {i}: rank {r.rank} ({r.pid}) still exists"
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):
        d = _interrupt(sig)
        seen.append(d["verdict"])
        assert {r["outcome"] for r in d["ranks"]} <= {"hung", "stopped"}
    # the CLI parent killed outright: its zygote and ranks must die by themselves
    for _ in range(3):
        p = _cli("-n", "3", "--hang-after", "30", os.path.join(EX, "mismatch.py"))
        pids = _wait_until_blocked(p, 3)
        p.kill()
        p.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and leftovers():
            time.sleep(0.1)
        assert leftovers() == [], f"after SIGKILL of the parent: {leftovers()}"
        seen.append("killed")
    assert len(seen) >= 30
    assert set(seen) >= {"ok", "hang", "crash", "error", "interrupted", "killed"}
    assert leftovers() == []
    assert listening_ports() == set()
    # the CLI runs killed with SIGKILL cannot remove their temp dirs themselves: their zygotes do
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and sandbox_dirs() - dirs:
        time.sleep(0.1)
    assert sandbox_dirs() - dirs == set()


def test_eight_concurrent_runs_all_pass(clean):
    procs = [_cli("-n", "4", "--json", os.path.join(EX, "allreduce.py")) for _ in range(8)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert [r["verdict"] for r in results] == ["ok"] * 8
    ports = set()
    for r in results:
        line = r["ranks"][0]["output"]
        assert "sum over 4 ranks: [10.0, 10.0, 10.0, 10.0]" in line
    assert len(results) == 8
