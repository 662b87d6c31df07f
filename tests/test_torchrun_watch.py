"""How the torchrun launcher reads its workers' traces (sandbox.agents), from hand-made tracks: what the hang rule
sees while torchrun may be restarting the workers, and what the verdict says of workers the sandbox killed with their
node. Both were found by CI under load, where the real runs only sometimes hit them (tests/test_torchrun_nodes.py
runs them for real)."""
from __future__ import annotations

from sandbox import agents, defaults, policy
from sandbox.events import RankTrack

AR = {"op": "all_reduce", "gname": "0", "group": [0, 1, 2, 3], "seq": 8, "shapes": [[4]], "dtypes": ["float32"],
      "redop": "SUM"}
INIT = {"op": "init_process_group", "group": [0, 1, 2, 3], "world_size": 4, "endpoint": "node0:29400"}
LOST = "Connection closed by peer [10.213.0.2]:51234"
NOW = 100.0


def _worker(rank, pid, *, call=AR, at=10.0, error=None, end=None):
    """A worker's track: its hello (with the pid torchrun gave it), one call entered at `at`, maybe raising `error`,
    maybe its last line `end` ("ok" or "error")."""
    t = RankTrack(rank)
    t.feed({"ev": "hello", "rank": rank, "world_size": 4, "pid": pid, "host": f"node{rank // 2}", "t": 0.0})
    t.feed({"ev": "enter", "rank": rank, "id": 1, "t": at, "site": "train.py:30", **call})
    if error:
        t.feed({"ev": "exit", "rank": rank, "id": 1, "t": at + 1, "error": error})
    if end == "ok":
        t.feed({"ev": "exit", "rank": rank, "id": 1, "t": at + 1})
        t.feed({"ev": "end", "rank": rank, "outcome": "ok", "exit_code": 0, "t": at + 2})
    elif end == "error":
        t.feed({"ev": "end", "rank": rank, "outcome": "error", "exit_code": 1, "t": at + 2,
                "error": {"type": "DistBackendError", "message": error or LOST, "traceback": ""}})
    return t


def _decide(tracks):
    settings = policy.Settings(hang_after=defaults.HANG_AFTER_S, timeout=defaults.RUN_TIMEOUT_S)
    return policy.decide(tracks, NOW, elapsed=30.0, quiet_s=30.0, failed_since=None, settings=settings)


def _dead_from(pids):
    return lambda pid: pid not in pids


def test_a_restart_in_progress_is_not_a_hang():
    """Node0's new workers already wait in init_process_group; node1's killed workers have not started again
    (their files are still the earlier attempt's). The hang rule must wait for torchrun, not end the job."""
    tracks = {0: _worker(0, 200, call=INIT), 1: _worker(1, 201, call=INIT), 2: _worker(2, 102), 3: _worker(3, 103)}
    seen = agents.watched(tracks, _dead_from({102, 103}))
    assert [seen[r].hello is None for r in range(4)] == [False, False, True, True]
    assert _decide(seen) is None


def test_a_failed_worker_is_torchruns_to_handle_too():
    """The other order: node1's new workers wait, node0's ended with an error in the earlier attempt."""
    tracks = {0: _worker(0, 100, error=LOST, end="error"), 1: _worker(1, 101, error=LOST, end="error"),
              2: _worker(2, 202, call=INIT), 3: _worker(3, 203, call=INIT)}
    seen = agents.watched(tracks, _dead_from({100, 101}))
    assert seen[0].hello is None and seen[0].exit_code is None
    assert _decide(seen) is None


def test_workers_blocked_on_peers_that_finished_are_still_a_hang():
    """The rule still fires where no restart can help: ranks 2 and 3 finished, ranks 0 and 1 wait for them."""
    tracks = {0: _worker(0, 100), 1: _worker(1, 101), 2: _worker(2, 102, end="ok"), 3: _worker(3, 103, end="ok")}
    seen = agents.watched(tracks, _dead_from({102, 103}))
    assert seen[2].exit_code == 0
    d = _decide(seen)
    assert d is not None and d.stop == policy.HANG


def test_workers_killed_inside_a_collective_are_crashed_not_hung():
    """Node1 killed while ranks 2 and 3 were inside all_reduce; ranks 0 and 1 then lost their connections. From the
    files alone that reads as a hang torn down; the pids the sandbox killed make it the crash it was."""
    def tracks():
        return {0: _worker(0, 100, error=LOST, end="error"), 1: _worker(1, 101, error=LOST, end="error"),
                2: _worker(2, 102), 3: _worker(3, 103)}

    assert policy.judge(tracks()).verdict == policy.HANG  # what the files alone say
    j = policy.judge(agents.killed_crashed(tracks(), [102, 103, 7]))  # 7: the node's agent, no worker
    assert j.verdict == "crash"
    assert (j.outcomes[2], j.outcomes[3], j.outcomes[0]) == ("crashed", "crashed", "error")


def test_a_killed_worker_that_had_finished_keeps_its_end():
    t = agents.killed_crashed({0: _worker(0, 100, end="ok")}, [100])[0]
    assert t.exit_code is None and policy.judge({0: t}).verdict == "ok"


def test_a_kept_trace_dir_starts_without_the_earlier_runs_torchrun_files(tmp_path):
    """A --trace-dir used again: torchrun's earlier attempts, its agents' logs and folders and the Flight Recorder
    dumps of the run before would be read as this run's (a restart count, an attempt number, a collective)."""
    from sandbox._run import options

    stale = ["agent-node0.log", "fr-2.pkl", "rank-0.jsonl", "attempts/0/rank-0.jsonl", "torchelastic-node1/x/y.json"]
    for name in stale + ["notes.txt", "attempts-old/keep.txt"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("earlier")
    options.trace_dir(str(tmp_path))
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == \
        ["attempts-old", "attempts-old/keep.txt", "notes.txt"]


def test_the_watch_reads_what_was_appended_and_a_restarted_ranks_file_afresh(tmp_path):
    """`events.DirTail`: the torchrun launcher's watch reads each trace as it grows (reading it whole at every look
    made a long run's watcher take a core from the workers); a file moved away by a restarted worker and written
    again is a new attempt, read from its start; a file gone is a rank not there yet."""
    import json
    import os

    from sandbox import events

    def write(rank, *evs, mode="a"):
        with open(tmp_path / f"rank-{rank}.jsonl", mode) as f:
            f.writelines(json.dumps({"rank": rank, "t": 1.0, **e}) + "\n" for e in evs)

    hello = {"ev": "hello", "world_size": 2, "pid": 1}
    write(0, hello, {"ev": "enter", "id": 1, "op": "barrier"})
    write(1, hello)
    tail = events.DirTail(str(tmp_path))
    first = tail.tracks()
    assert first[0].pending["op"] == "barrier" and first[1].pending is None
    write(0, {"ev": "exit", "id": 1})
    with open(tmp_path / "rank-1.jsonl", "a") as f:
        f.write('{"ev": "enter", "rank": 1, "id": 1, "t": 1.0, "op": "bar')  # a line still being written
    now = tail.tracks()
    assert now[0] is first[0] and now[0].pending is None and len(now[0].events) == 3  # fed, not read again
    assert now[1].pending is None
    with open(tmp_path / "rank-1.jsonl", "a") as f:
        f.write('rier"}\n')
    assert tail.tracks()[1].pending["op"] == "barrier"
    os.makedirs(tmp_path / "attempts" / "0")
    os.replace(tmp_path / "rank-0.jsonl", tmp_path / "attempts" / "0" / "rank-0.jsonl")  # torchrun restarted it
    assert sorted(tail.tracks()) == [1]
    write(0, dict(hello, pid=2), mode="w")
    again = tail.tracks()[0]
    assert again is not first[0] and again.hello["pid"] == 2 and len(again.events) == 1
    tail.close()


def test_the_workers_the_sandbox_ended_are_stopped_or_hung_not_crashed(tmp_path):
    """One lifecycle: when the sandbox stops a run under torchrun (a timeout here), the workers it ends are judged as
    under its own launcher: one busy in its own code was stopped, the ones inside a call were hung, and the run timed
    out. From their files alone the busy one died (no end, no call) and the run read as a crash."""
    import signal
    import subprocess
    import time

    import psutil

    from sandbox import events

    events.write_meta(str(tmp_path))
    barrier = {"op": "barrier", "gname": "0", "group": [0, 1, 2, 3], "seq": 1}
    # live processes: the workers run until the sandbox ends them (the nodes' kill is not made here: they stay)
    workers = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
    try:
        _ended_by_the_sandbox(tmp_path, barrier, workers)
        # frozen first, every node's at once (then the nodes are killed one by one): a worker left running while
        # another node died would see its peer's connection close and end its script with an error of its own
        deadline = time.monotonic() + 10  # a signal is delivered when the process is next scheduled
        while (states := [psutil.Process(w.pid).status() for w in workers]) != [psutil.STATUS_STOPPED] * 4 \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        assert states == [psutil.STATUS_STOPPED] * 4
    finally:
        for w in workers:
            w.send_signal(signal.SIGKILL)
            w.wait()


def _ended_by_the_sandbox(tmp_path, barrier, workers):
    import json

    from sandbox import rundir
    from sandbox.topology import Topology

    for r in range(4):
        t = _worker(r, workers[r].pid, call=INIT, at=1.0)
        evs = t.events + [{"ev": "exit", "rank": r, "id": 1, "t": 2.0}]
        if r:
            evs.append({"ev": "enter", "rank": r, "id": 2, "t": 3.0, "site": "train.py:31", **barrier})
        with open(rundir.trace(str(tmp_path), r), "w") as f:
            f.writelines(json.dumps(e) + "\n" for e in evs)

    class Cluster:  # the nodes: what `end` kills (nothing here runs)
        killed: list = []

        def kill_node(self, i):
            self.killed.append(i)

    class Life:
        dir, n, schedule, cluster = str(tmp_path), 4, None, Cluster()
        topology = Topology(nnodes=2, per_node=2, by_hostname=True)

    procs = agents.TorchrunProcs(Life(), {"kind": "script", "path": "train.py", "argv": []}, 0, {}, ())
    procs.poll(0)
    live = [t for t in procs.watched(procs.tracks()).values() if t.exit_code is None]
    assert [t.rank for t in live] == [0, 1, 2, 3] and all(t.hello for t in live)
    assert policy.judge(procs.final(), policy.TIMEOUT).verdict == "crash"  # what the files alone say
    procs.end(live, policy.TIMEOUT)
    assert Life.cluster.killed == [0, 1]
    j = policy.judge(procs.final(), policy.TIMEOUT, timeout=15.0)
    assert j.verdict == policy.TIMEOUT
    assert j.outcomes == {0: "stopped", 1: "hung", 2: "hung", 3: "hung"}
    procs.traces.close()
