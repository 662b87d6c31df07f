"""Nothing is left behind, whatever happens: 30 mixed runs (ok, hang, crash, error, Ctrl-C of the CLI, SIGTERM to
the parent, the parent killed), each with the verdict its program must give, and then no process of ours (found by
parentage: this test process is a subreaper, and by the runs' process groups), no listening socket, no temp dir.
Hung ranks are ended by the sandbox's own signal; processes a rank starts end with the run. And 8 CLI runs started
at once all pass, each with a store of its own."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

import scenarios
import scenarios_proc
from conftest import (ROOT, assert_group_gone, leftovers, listening_ports, port_is_listening, sandbox_dirs,
                      still_running, wait_for)
from sandbox import launch

EX = os.path.join(ROOT, "examples")
PROC = os.path.join(ROOT, "tests", "scenarios_proc.py")


def _cli(*args, sibling: bool = True):
    env = dict(os.environ, PYTHONPATH=ROOT)
    if sibling:  # the product's process tree: a sibling zygote per run (else the session's one hash seed)
        env.pop("SANDBOX_HASH_SEEDS", None)
    return subprocess.Popen([sys.executable, "-m", "sandbox.run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)


def _wait_for_ranks(proc, n):
    """Wait until the CLI's run has n ranks (its zygote's children); returns the pids of the run's processes."""
    def ranks():
        kids = psutil.Process(proc.pid).children(recursive=True)
        return [k.pid for k in kids] if sum(1 for k in kids if k.ppid() != proc.pid) >= n else None
    return wait_for(ranks, "the run to start its ranks", timeout=30)


def _ppid(pid: int) -> int:
    try:
        return psutil.Process(pid).ppid()
    except psutil.NoSuchProcess:
        return 0


def _cmdline(pid: int) -> list:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:  # gone, or not ours to read
        return []


def _listening(pids) -> dict:
    """pid -> the addresses it listens on, for those of `pids` that listen."""
    out: dict = {}
    for c in psutil.net_connections("tcp"):
        if c.status == psutil.CONN_LISTEN and c.pid in pids:
            out.setdefault(c.pid, []).append(c.laddr)
    return out


def _interrupt(sig):
    p = _cli("-n", "3", "--json", "--hang-after", "30", os.path.join(EX, "mismatch.py"))
    pids = _wait_for_ranks(p, 3)
    # mid-run, every process of it listens (the zygote: the store; each rank: its gloo pairs), on loopback only;
    # but the sibling zygote (the ranks of another hash seed), which only forks and reaps
    # (its ranks are its forks: they show its command line too)
    siblings = {q for q in pids if "--sibling" in _cmdline(q) and "--sibling" not in _cmdline(_ppid(q))}
    assert len(siblings) == 1, [_cmdline(q) for q in pids]

    def all_listen():
        got = _listening(pids)
        return got if set(got) == set(pids) - siblings else None
    listening = wait_for(all_listen, "every process of the run to listen", timeout=30)
    addresses = [a for addrs in listening.values() for a in addrs]
    assert all(a.ip == "127.0.0.1" for a in addresses), addresses
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 128 + sig, err
    d = json.loads(out)
    assert d["verdict"] == "interrupted"
    assert still_running(pids) == [], "processes of the interrupted run are still running"
    return d


def test_thirty_mixed_runs_leave_nothing():
    dirs = sandbox_dirs()
    kinds = {scenarios.ok_sum: "ok", scenarios.op_mismatch: "hang", scenarios.crash_in_call: "crash",
             scenarios.raises: "error", scenarios.send_cycle: "hang", scenarios.exits_early: "error"}
    for i in range(24):
        fn = list(kinds)[i % len(kinds)]
        res = launch(fn, world_size=2 if fn is scenarios.send_cycle else 3, timeout=30)
        assert res.verdict == kinds[fn], f"run {i} ({fn.__name__}): {res.diagnosis.summary}"
        if res.verdict == "hang":
            _assert_ended_by_the_sandbox(res)
        ports = {int(e["MASTER_PORT"]) for e in res.events if e.get("op") == "init_process_group" and e.get("MASTER_PORT")}
        assert ports, "every run rendezvoused through its own store"
        for port in ports:
            assert not port_is_listening(port), f"run {i}: the store port {port} is still open"
        assert_group_gone(res.pgid)
        for r in res.ranks:
            assert r.pid and not psutil.pid_exists(r.pid), f"run {i}: rank {r.rank} ({r.pid}) still exists"
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):
        d = _interrupt(sig)
        assert {r["outcome"] for r in d["ranks"]} <= {"hung", "stopped"}
    # the CLI parent killed outright: its zygote and ranks must die by themselves
    for _ in range(3):
        p = _cli("-n", "3", "--hang-after", "30", os.path.join(EX, "mismatch.py"))
        _wait_for_ranks(p, 3)
        p.kill()
        p.wait(timeout=10)
        left = leftovers()
        assert left == [], f"after SIGKILL of the parent: {left}"
    assert leftovers() == []
    assert listening_ports() == set()
    # the CLI runs killed with SIGKILL cannot remove their temp dirs themselves: their zygotes do
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and sandbox_dirs() - dirs:
        time.sleep(0.1)
    assert sandbox_dirs() - dirs == set()


def test_an_orphaned_run_removes_its_directory_while_its_ranks_write_in_it(tmp_path, clean):
    """The CLI killed outright while every rank makes files in the run's directory: its zygote ends the run and
    removes the directory. Rank 1 is the sibling zygote's (the product's two hash seeds), which the run's zygote
    did not fork: were it still writing while the directory is removed, a file made after rmtree listed the folder
    would keep the folder (`clean` checks that none is left)."""
    p = _cli("-n", "2", PROC, "litter", str(tmp_path))
    try:
        wait_for(lambda: len(scenarios_proc.read_notes(str(tmp_path), "writing-")) == 2 or None,
                 "both ranks to write in the run directory", timeout=60)
    finally:
        p.kill()
        p.wait(timeout=10)


def test_eight_concurrent_runs_all_pass(clean):
    # one zygote a run: eight imports of torch at once are what makes the runs overlap (the sibling zygote of the
    # product's two hash seeds is the other tests' subject here)
    procs = [_cli("-n", "4", "--json", PROC, "allreduce", sibling=False) for _ in range(8)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert [r["verdict"] for r in results] == ["ok"] * 8
    for r in results:
        assert [(x["rank"], x["outcome"], x["exit_code"]) for x in r["ranks"]] == [(k, "ok", 0) for k in range(4)]
        for x in r["ranks"]:
            assert "sum over 4 ranks: [10.0, 10.0, 10.0, 10.0]" in x["output"], f"rank {x['rank']}: {x['output']!r}"
    # each run hosted its own store: the runs overlapped (8 imports of torch at once), so a shared port would
    # have meant two runs in one rendezvous; and every store was closed when its CLI exited
    ports = [_store_port(r) for r in results]
    assert len(set(ports)) == 8, ports
    open_ports = [port for port in ports if port_is_listening(port)]
    assert open_ports == [], f"store ports still listening after the runs: {open_ports}"


def _store_port(d: dict) -> int:
    """The rendezvous port the ranks of one run were given (each rank prints its MASTER_PORT)."""
    ports = {int(p) for x in d["ranks"] for p in re.findall(r"MASTER_PORT=(\d+)", x["output"])}
    assert len(ports) == 1, f"every rank of a run rendezvous at one port: {ports}"
    return ports.pop()


def _assert_ended_by_the_sandbox(res):
    """A hang is ended by the sandbox killing each hung rank (the zygote reports the signal); a rank that dies only
    when the run's process group is torn down afterwards has no exit status at all."""
    hung = [r for r in res.ranks if r.outcome == "hung"]
    assert hung, res.diagnosis.summary
    assert [(r.rank, r.exit_code) for r in hung] == [(r.rank, -signal.SIGKILL) for r in hung]


@pytest.mark.parametrize("what", ["hang", "exit", "signal"])
def test_a_ranks_own_processes_end_with_the_run(what, tmp_path, clean):
    """A process a rank starts (`sleep 301`) is in the run's process group: it ends with the run whether the run
    hung, or a rank exited (os._exit) or was killed (SIGKILL) while its child ran."""
    res = launch(scenarios_proc.children_then, world_size=2, args=(what, str(tmp_path)), timeout=60)
    assert res.verdict == {"hang": "hang", "exit": "crash", "signal": "crash"}[what], res.diagnosis.summary
    children = {n: int(pid) for n, pid in scenarios_proc.read_notes(str(tmp_path), "child-").items()}
    assert sorted(children) == ["child-0", "child-1"]
    assert still_running(children.values()) == [], f"the ranks' children outlived the run: {children}"
    if what == "hang":
        _assert_ended_by_the_sandbox(res)
    else:
        assert res.ranks[1].exit_code == (3 if what == "exit" else -signal.SIGKILL)


def test_the_leftover_check_is_neither_racy_nor_blind():
    """`leftovers()` waits out a process that ends within its grace period (as a rank does after SIGKILL) and
    reports one that stays."""
    subprocess.Popen(["sleep", "0.5"])  # still running when the check starts; reaped by the check
    assert leftovers() == []
    stays = subprocess.Popen(["sleep", "301"])
    try:
        assert [line.split()[0] for line in leftovers()] == [str(stays.pid)]
    finally:
        stays.kill()
        stays.wait()
