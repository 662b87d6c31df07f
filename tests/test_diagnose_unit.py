"""The diagnosis alone, on traces recorded from real runs (tests/record_traces.py) and on small hand-made traces:
no ranks are started here."""
import copy
import json
import os

import pytest

from sandbox import policy
from sandbox.diagnose import diagnose_hang, progress_possible, provable_deadlock
from sandbox.diagnose.__main__ import load_result
from sandbox.events import RankTrack, load_dir
from sandbox.words import short

TRACES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traces")
RECORDED = sorted(os.listdir(TRACES))


def _expected(name):
    with open(os.path.join(TRACES, name, "expected.json")) as f:
        return json.load(f)


def _load(name):
    """The tracks as the live run's launcher had them: exit codes known, the ranks it ended marked."""
    tracks = load_dir(os.path.join(TRACES, name))
    exp = _expected(name)
    for r, info in exp["ranks"].items():
        t = tracks[int(r)]
        t.pid = 1000 + int(r)  # a live run knows its ranks' pids (the value does not matter here)
        t.exit_code = info["exit_code"]
        t.ended_by_sandbox = info["outcome"] in ("hung", "stopped")
    return tracks, exp


def _why_stopped(exp):
    if exp["verdict"] == "hang":
        return policy.HANG
    if any(i["outcome"] == "stopped" for i in exp["ranks"].values()):
        return policy.FAILURE
    return None


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_trace_gives_the_live_verdict(name):
    tracks, exp = _load(name)
    j = policy.judge(tracks, _why_stopped(exp))
    assert (j.verdict, j.diagnosis.kind, j.diagnosis.culprit_ranks) == (exp["verdict"], exp["kind"],
                                                                        exp["culprit_ranks"]), j.diagnosis.summary
    assert j.outcomes == {int(r): i["outcome"] for r, i in exp["ranks"].items()}


@pytest.mark.parametrize("name", RECORDED)
def test_offline_judgement_equals_the_live_one(name):
    res = load_result(os.path.join(TRACES, name))  # files alone, no exit codes: as from torchrun
    tracks, exp = _load(name)
    live = policy.judge(tracks, _why_stopped(exp))
    verdict = live.verdict
    if any(i["outcome"] == "crashed" and (i["exit_code"] or 0) < 0 and tracks[int(r)].pending is not None
           for r, i in exp["ranks"].items()):
        # a rank killed by a signal inside a call (gloo's SIGABRT) leaves the same files as one its launcher ended
        # there: from the files alone the run is a hang, with the same diagnosis
        verdict = "hang"
    if any(i["outcome"] == "stopped" and tracks[int(r)].pending is not None for r, i in exp["ranks"].items()):
        verdict = "hang"  # likewise a rank its launcher ended inside a call once another had failed
    assert (res.verdict, res.diagnosis.kind, res.diagnosis.culprit_ranks) == (verdict, live.diagnosis.kind,
                                                                              live.diagnosis.culprit_ranks)
    assert (res.diagnosis.op, res.diagnosis.group, res.diagnosis.seq, res.diagnosis.site) == (
        live.diagnosis.op, live.diagnosis.group, live.diagnosis.seq, live.diagnosis.site)


@pytest.mark.parametrize("name", [n for n in RECORDED if _expected(n)["verdict"] == "hang"])
def test_recorded_hang_is_not_progressable(name):
    tracks, _ = _load(name)
    for t in tracks.values():
        if t.ended_by_sandbox:  # as the watchdog saw them: alive, blocked (a rank that had exited stays so)
            t.exit_code, t.ended_by_sandbox = None, False
    assert not progress_possible(tracks)


def test_fixing_the_odd_rank_makes_the_mismatch_go_away():
    tracks, _ = _load("op_mismatch")
    for t in tracks.values():
        t.exit_code, t.ended_by_sandbox = None, False
    odd = tracks[1].pending
    good = tracks[0].pending
    for k in ("op", "sig", "shapes", "dtypes", "root", "redop"):  # rank 1 now calls what the others call
        if k in good:
            odd[k] = copy.deepcopy(good[k])
    assert progress_possible(tracks)  # the same call on every rank: it can complete, not a hang


# ------------------------------------------------------------------------------------------ hand-made traces

def _track(rank, *events):
    t = RankTrack(rank)
    t.feed({"ev": "hello", "rank": rank, "world_size": 2, "t": 0.0})
    for i, e in enumerate(events, start=1):
        t.feed({"ev": "enter", "rank": rank, "id": i, "t": float(i), "site": f"job.py:{10 + i}", **e})
    return t


def _done(t, call_id):
    t.feed({"ev": "exit", "rank": t.rank, "id": call_id, "t": 9.0})


AR = {"op": "all_reduce", "gname": "0", "group": [0, 1], "seq": 1, "shapes": [[4]], "dtypes": ["float32"],
      "redop": "SUM"}


def test_matching_collective_can_complete():
    tracks = {0: _track(0, AR), 1: _track(1, AR)}
    assert progress_possible(tracks)


def test_send_meets_recv_but_send_meets_send_does_not():
    send0, recv1 = {"op": "send", "peer": 1}, {"op": "recv", "peer": 0}
    assert progress_possible({0: _track(0, send0), 1: _track(1, recv1)})
    tracks = {0: _track(0, send0), 1: _track(1, {"op": "send", "peer": 0})}
    assert not progress_possible(tracks)
    d = diagnose_hang(tracks)
    assert (d.kind, d.culprit_ranks) == ("p2p_cycle", [0, 1])


def test_posted_isend_satisfies_a_blocking_recv():
    a = _track(0, {"op": "isend", "peer": 1, "async": True}, {"op": "recv", "peer": 1})
    _done(a, 1)  # isend returned a Work: posted, not yet waited
    b = _track(1, {"op": "isend", "peer": 0, "async": True}, {"op": "recv", "peer": 0})
    _done(b, 1)
    assert progress_possible({0: a, 1: b})


def test_rank_gone_is_missing():
    a = _track(0, AR)
    b = _track(1)
    b.feed({"ev": "end", "rank": 1, "outcome": "ok", "exit_code": 0, "t": 3.0})
    b.exit_code = 0
    tracks = {0: a, 1: b}
    assert not progress_possible(tracks)
    d = diagnose_hang(tracks)
    assert (d.kind, d.culprit_ranks) == ("missing_ranks", [1])
    assert "already finished" in d.summary


@pytest.mark.parametrize("first", [0, 1])
def test_the_rank_most_others_wait_for_is_named_whichever_call_began_first(first):
    """Ranks 0 and 2 wait for rank 1 in an all_reduce; rank 1 waits for rank 0 in a sub-group's barrier: a cycle
    across the two groups, ranks 0 and 1 in it and rank 2 behind it. Rank 1 is the odd one, whether rank 0 or rank 1
    entered its call first (a recorded run once named rank 0 under load)."""
    world = {"op": "all_reduce", "gname": "0", "group": [0, 1, 2], "seq": 1, "shapes": [[2]], "dtypes": ["float32"],
             "site": "job.py:9"}
    sub = {"op": "barrier", "gname": "1", "group": [0, 1], "seq": 1, "site": "job.py:7"}
    tracks = {}
    for rank, call in ((0, world), (1, sub), (2, world)):
        t = tracks[rank] = RankTrack(rank)
        t.feed({"ev": "hello", "rank": rank, "world_size": 3, "t": 0.0})
        t.feed({"ev": "enter", "rank": rank, "id": 1, "t": 1.0 if rank == first else 2.0, **call})
    assert not progress_possible(tracks)
    d = diagnose_hang(tracks)
    assert (d.kind, d.culprit_ranks, d.op) == ("wait_cycle", [1], "barrier"), d.summary
    assert d.details["cycle"] == [1, 0] and d.details["behind"] == [2], d.details
    assert ("rank 1 waits in barrier #1 of group [0, 1] at job.py:7 for rank 0, which waits in all_reduce #1"
            in d.summary), d.summary


def test_init_endpoints_disagree():
    i0 = {"op": "init_process_group", "endpoint": "127.0.0.1:29500", "world_size": 2, "group": [0, 1],
          "init_method": "tcp://localhost:29500", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "41000"}
    i1 = dict(i0, endpoint="127.0.0.1:41000", init_method="env://")
    tracks = {0: _track(0, i0), 1: _track(1, i1)}
    assert not progress_possible(tracks)
    d = diagnose_hang(tracks)
    assert (d.kind, d.culprit_ranks) == ("init_mismatch", [0])
    assert "29500" in d.summary and "41000" in d.summary


def test_short_strips_gloo_boilerplate():
    msg = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
           "[127.0.0.1]:52421. This is typically caused by a remote worker crashing. GLHF!\nmore")
    assert short(msg) == "Connection closed by peer [127.0.0.1]:52421"


def test_an_nccl_call_in_flight_stays_pending_until_done():
    t = _track(0, AR)
    t.feed({"ev": "exit", "rank": 0, "id": 1, "op": "all_reduce", "inflight": True, "t": 2.0})
    assert t.pending is not None and t.pending["op"] == "all_reduce"  # returned to Python, not finished on the GPU
    t.feed({"ev": "done", "rank": 0, "id": 1, "t": 2.5})
    assert t.pending is None


def test_a_peer_that_already_left_the_same_call_did_its_part():
    bc = {"op": "broadcast", "gname": "0", "group": [0, 1], "seq": 1, "root": 0, "shapes": [[4]], "dtypes": ["float32"]}
    root = _track(0, bc, {"op": "send", "peer": 1})
    _done(root, 1)  # the root's broadcast returned, it went on to a send
    other = _track(1, bc)  # still receiving the broadcast: it can finish, then take the send
    assert progress_possible({0: root, 1: other})
    other2 = _track(1, dict(bc, shapes=[[8]]))  # but not a different broadcast
    assert not progress_possible({0: root, 1: other2})


def test_send_and_recv_with_different_tags_never_match():
    tracks = {0: _track(0, {"op": "send", "peer": 1, "tag": 1}), 1: _track(1, {"op": "recv", "peer": 0, "tag": 2})}
    assert not progress_possible(tracks)
    d = diagnose_hang(tracks)
    assert (d.kind, d.culprit_ranks) == ("p2p_unmatched", [0, 1]) and "different tags" in d.summary, d.summary


# ------------------------------------------------------------------------------------------ the watchdog's policy

S = policy.Settings(hang_after=1.0, settle=0.1, timeout=60.0)


def _decide(tracks, now=100.0, elapsed=5.0, quiet_s=0.0, failed_since=None):
    return policy.decide(tracks, now, elapsed=elapsed, quiet_s=quiet_s, failed_since=failed_since, settings=S)


def _blocked_at(t, when):
    t.pending["t"] = when


def test_a_provable_mismatch_is_named_once_the_traces_settle():
    tracks, _ = _load("op_mismatch")
    for t in tracks.values():
        t.exit_code, t.ended_by_sandbox = None, False
        _blocked_at(t, 99.95)  # the last rank blocked 0.05 s ago
    assert provable_deadlock(tracks)
    assert _decide(tracks, quiet_s=0.05) is None          # a trace changed just now: wait for it to settle
    d = _decide(tracks, quiet_s=0.1)
    assert d is not None and d.stop == policy.HANG and "provable" in d.reason


def test_cycles_are_provable_across_groups_unless_a_send_in_them_may_return_unmatched():
    """A send/send cycle with nothing posted, and a cycle across groups (rank 1 in a sub-group's barrier waits for
    rank 0, which waits for it in the world's all_reduce), are certain the moment the last rank blocks. A cycle
    within one group (rank 1 in a recv from rank 2, which waits for it in the world's all_reduce) is left to the
    grace period, as is a cycle across groups through a send: gloo returns from a send of a small message before
    its recv is posted, so the sender might still move."""
    cycle = {0: _track(0, {"op": "send", "peer": 1}), 1: _track(1, {"op": "send", "peer": 0})}
    assert provable_deadlock(cycle)
    tracks, _ = _load("groups_cycle")
    for t in tracks.values():
        t.exit_code, t.ended_by_sandbox = None, False
    assert not progress_possible(tracks) and provable_deadlock(tracks)
    sub = {"op": "send", "peer": 1, "gname": "1", "group": [0, 1]}
    world = {**AR, "group": [0, 1, 2]}
    through_a_send = {0: _track(0, sub), 1: _track(1, world), 2: _track(2, world)}
    assert not progress_possible(through_a_send) and not provable_deadlock(through_a_send)
    assert diagnose_hang(through_a_send).kind == "wait_cycle"
    tracks, _ = _load("missing_rank")
    for t in tracks.values():
        t.exit_code, t.ended_by_sandbox = None, False
    assert not progress_possible(tracks) and not provable_deadlock(tracks)
    for t in tracks.values():
        if t.pending:
            _blocked_at(t, 99.5)
    assert _decide(tracks, quiet_s=0.5) is None          # it might still move: the grace period applies
    for t in tracks.values():
        if t.pending:
            _blocked_at(t, 98.9)
    d = _decide(tracks, quiet_s=1.1)
    assert d.stop == policy.HANG and d.blocked_s == pytest.approx(1.1)


def test_a_rank_whose_stuck_send_raised_as_the_sandbox_ended_a_peer_was_hung_in_it():
    """The run CI once got wrong: three ranks in a send cycle; the sandbox ends rank 0 first, rank 2's send raises
    "Connection closed by peer" and rank 2 is ended before it writes its own error record. Its send is where it was
    stuck (hung, part of the cycle), not a rank busy in its own code."""
    conn = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer"
            " [127.0.0.1]:27815")
    tracks = {0: _track(0, {"op": "send", "peer": 2}), 1: _track(1, {"op": "recv", "peer": 2}),
              2: _track(2, {"op": "send", "peer": 0})}
    tracks[2].feed({"ev": "exit", "rank": 2, "id": 1, "t": 9.0, "error": conn})
    for t in tracks.values():
        t.pid, t.ended_by_sandbox = 1000 + t.rank, True
    j = policy.judge(tracks, policy.HANG)
    assert j.outcomes == {0: "hung", 1: "hung", 2: "hung"}
    assert (j.diagnosis.kind, j.diagnosis.culprit_ranks) == ("p2p_cycle", [0, 2]), j.diagnosis.summary
    tracks[2].failed_with = "RuntimeError: the tensor was the wrong shape"  # a real error is not the teardown's
    assert policy.judge(tracks, policy.HANG).outcomes[2] == "stopped"


def test_a_posted_isend_keeps_a_cycle_from_being_provable():
    a = _track(0, {"op": "isend", "peer": 1, "async": True}, {"op": "send", "peer": 1})
    _done(a, 1)
    b = _track(1, {"op": "send", "peer": 0})
    assert not provable_deadlock({0: a, 1: b})


def test_decide_stops_on_failure_and_timeout_and_not_while_busy():
    busy = {0: _track(0), 1: _track(1, AR)}
    assert _decide(busy, quiet_s=5) is None
    assert _decide(busy, elapsed=61).stop == policy.TIMEOUT
    busy[0].exit_code = 3
    # its peer, blocked since t=1.0, gets a moment to report what it saw, then is ended
    assert _decide(busy, now=1.1, failed_since=0.1) is None
    assert _decide(busy, now=1.4, failed_since=0.4).stop == policy.FAILURE
    busy[1].feed({"ev": "exit", "rank": 1, "id": 1, "op": "all_reduce", "t": 1.2})  # busy in its own code now
    assert _decide(busy, now=1.5, failed_since=0.5) is None
    assert _decide(busy, now=2.0, failed_since=1.0).stop == policy.FAILURE


def test_blocked_ranks_whose_peers_have_all_exited_are_hung():
    # 4 ranks, different rank lists to new_group: ranks 0 and 3 got through and exited, 1 and 2 wait forever
    def ng(rank, ranks, done):
        t = RankTrack(rank)
        t.feed({"ev": "hello", "rank": rank, "world_size": 4, "t": 0.0})
        t.feed({"ev": "enter", "rank": rank, "id": 1, "op": "new_group", "ranks": ranks, "index": 0, "t": 1.0,
                "site": "job.py:5"})
        if done:
            t.feed({"ev": "exit", "rank": rank, "id": 1, "op": "new_group", "t": 1.1})
            t.feed({"ev": "end", "rank": rank, "outcome": "ok", "exit_code": 0, "t": 1.2})
            t.exit_code = 0
        t.pid = 100 + rank
        return t
    tracks = {0: ng(0, [0, 1], True), 1: ng(1, [1, 2], False), 2: ng(2, [1, 2], False), 3: ng(3, [0, 1], True)}
    assert not progress_possible(tracks)
    d = diagnose_hang(tracks)
    assert d.kind in ("group_mismatch", "missing_ranks"), d.summary


def test_a_collective_whose_early_leaver_has_exited_cannot_complete():
    bc = {"op": "broadcast", "gname": "0", "group": [0, 1], "seq": 1, "root": 0, "shapes": [[4]], "dtypes": ["float32"]}
    root = _track(0, bc)
    _done(root, 1)
    other = _track(1, bc)
    assert progress_possible({0: root, 1: other})          # the root left early but is alive: fine
    root.exit_code, root.pid, other.pid = 0, 10, 11
    assert not progress_possible({0: root, 1: other})      # it has exited: rank 1 can only be hung


# ------------------------------------------------------------------------------------------ the judge and the words

def test_interrupted_is_not_worded_as_a_timeout():
    tracks, _ = _load("op_mismatch")
    j = policy.judge(tracks, "interrupted", timeout=2.3456)
    assert j.verdict == "interrupted"
    assert j.diagnosis.summary.startswith("Interrupted")
    assert "timeout" not in j.diagnosis.summary and "2.3456" not in j.diagnosis.summary
    assert set(j.outcomes.values()) == {"hung"}


def test_every_rank_raising_the_same_error_is_said_once():
    def raising(rank):
        t = _track(rank)
        t.feed({"ev": "end", "rank": rank, "outcome": "error", "t": 2.0,
                "error": {"type": "SyntaxError", "message": "invalid syntax (job.py, line 3)", "site": "job.py:3"}})
        t.exit_code, t.pid = 1, 10 + rank
        return t
    tracks = {r: raising(r) for r in range(3)}
    j = policy.judge(tracks, policy.FAILURE)
    assert j.verdict == "error"
    assert j.diagnosis.summary.startswith("All 3 ranks raised the same error, SyntaxError"), j.diagnosis.summary
    assert "peers saw" not in j.diagnosis.summary


def test_feeding_events_leaves_them_as_the_tracer_wrote_them():
    t = _track(0, dict(AR))
    t.feed({"ev": "exit", "rank": 0, "id": 1, "op": "all_reduce", "inflight": True, "t": 2.0})
    t.feed({"ev": "done", "rank": 0, "id": 1, "t": 2.5})
    enter = next(e for e in t.events if e["ev"] == "enter")
    assert set(enter) == {"ev", "rank", "id", "t", "site"} | set(AR)


def test_stack_top_shows_user_and_catalogue_frames_but_not_plumbing(tmp_path):
    from sandbox import words
    import sandbox
    pkg = os.path.dirname(sandbox.__file__)
    stack = (f'Thread 0x1 (most recent call first):\n'
             f'  File "{pkg}/trace/ops.py", line 300 in traced\n'
             f'  File "{pkg}/bugs/kv_sync.py", line 88 in broken\n'
             f'  File "{pkg}/rank.py", line 120 in _run\n')
    assert words.stack_top(stack).endswith("kv_sync.py:88 (in broken)")
    user = '  File "/home/me/sandbox/train.py", line 7 in step\n'  # a user's own folder named sandbox
    assert words.stack_top("Thread 0x1:\n" + user) == "/home/me/sandbox/train.py:7 (in step)"


def test_a_value_is_read_without_touching_sys_modules():
    import pickle
    import sys
    from sandbox.result import RankResult
    before = dict(sys.modules)
    r = RankResult(rank=0, outcome="ok", value_bytes=pickle.dumps({"x": [1, 2]}))
    assert r.value == {"x": [1, 2]}
    assert sys.modules.keys() == before.keys()


def test_another_format_version_is_refused(tmp_path):
    import shutil
    from sandbox.events import FormatError
    d = tmp_path / "old"
    shutil.copytree(os.path.join(TRACES, "send_cycle"), d)
    (d / "meta.json").write_text('{"format": "dist-sandbox-trace", "version": 0}')
    with pytest.raises(FormatError, match="version 0"):
        load_dir(str(d))


def test_the_timeline_draws_an_in_flight_call_until_it_is_done():
    from sandbox.report import spans
    enter = {"ev": "enter", "rank": 0, "id": 1, "op": "all_reduce", "t": 1.0}
    inflight = {"ev": "exit", "rank": 0, "id": 1, "op": "all_reduce", "inflight": True, "t": 1.1}
    bars, stuck = spans([enter, inflight], [0])
    assert bars[0] == [] and stuck == [enter]                   # returned to Python, still running on the GPU
    bars, stuck = spans([enter, inflight, {"ev": "done", "rank": 0, "id": 1, "t": 3.0}], [0])
    assert bars[0] == [(enter, 3.0, False)] and stuck == []


def test_the_log_cut_says_line_or_lines():
    import io
    from sandbox.result import Diagnosis, RankResult, RunResult
    def cut(n_lines):
        res = RunResult(verdict="ok", world_size=1, wall_s=1.0, diagnosis=Diagnosis(kind="none", cause="fine"),
                        ranks=[RankResult(rank=0, outcome="ok", exit_code=0,
                                          output="\n".join(map(str, range(n_lines))))])
        out = io.StringIO()
        from sandbox.report import print_result
        print_result(res, file=out, max_log_lines=2)
        return out.getvalue()
    assert "... 1 earlier line\n" in cut(3)
    assert "... 2 earlier lines\n" in cut(4)


def test_offline_a_peer_lost_error_in_the_stuck_call_is_the_teardown_of_a_hang():
    # torchrun ended a send/send deadlock: rank 0 was killed inside its send; rank 1's send raised first because
    # its peer went away. Judged from the files alone, it is still the cycle.
    t0 = _track(0, {"op": "send", "peer": 1})
    t1 = _track(1, {"op": "send", "peer": 0})
    t1.feed({"ev": "exit", "rank": 1, "id": 1, "op": "send", "t": 5.0, "error": "RuntimeError: Connection closed by peer"})
    t1.feed({"ev": "end", "rank": 1, "outcome": "error", "t": 5.1,
             "error": {"type": "RuntimeError", "message": "[../gloo/pair.cc:534] Connection closed by peer [127.0.0.1]:5"}})
    j = policy.judge({0: t0, 1: t1})
    assert (j.verdict, j.diagnosis.kind, j.diagnosis.culprit_ranks) == ("hang", "p2p_cycle", [0, 1])
    t1.end["error"]["message"] = "ValueError: bad batch"  # a real error of its own is still an error
    assert policy.judge({0: t0, 1: t1}).verdict == "error"


def test_offline_a_rank_gone_outside_any_call_is_a_crash_whether_or_not_its_peers_got_an_error():
    # rank 0 called os._exit(3) in its own code; ranks 1 and 2 wait in a barrier for it. Live, the sandbox says
    # crash; from the files alone it must too, whether the waiting ranks saw "connection closed" or were killed
    # before they could (which one happens is a race)
    barrier = {"op": "barrier", "gname": "0", "group": [0, 1, 2], "seq": 1}
    def tracks():
        return {0: _track(0), 1: _track(1, dict(barrier)), 2: _track(2, dict(barrier))}
    j = policy.judge(tracks())
    assert (j.verdict, j.diagnosis.kind, j.diagnosis.culprit_ranks) == ("crash", "rank_crashed", [0])
    t = tracks()
    for r in (1, 2):
        t[r].feed({"ev": "exit", "rank": r, "id": 1, "op": "barrier", "t": 3.0,
                   "error": "RuntimeError: Connection closed by peer"})
        t[r].feed({"ev": "end", "rank": r, "outcome": "error", "t": 3.1,
                   "error": {"type": "RuntimeError", "message": "Connection closed by peer [127.0.0.1]:5"}})
    j = policy.judge(t)
    assert (j.verdict, j.diagnosis.kind, j.diagnosis.culprit_ranks) == ("crash", "rank_crashed", [0])


def test_the_recorded_dtype_mismatch_differs_in_dtype_alone():
    """Recorded from scenarios.dtype_mismatch (rank 2 all_reduces float64, the others float32): the calls differ in
    nothing else, and the judge names rank 2 and the dtype, whichever rank gloo aborted."""
    from sandbox import calls
    tracks, exp = _load("dtype_mismatch")
    at = {r: t.by_bucket[("0", 1)] for r, t in tracks.items()}
    assert calls.disagreements(at, calls.FULL) == calls.disagreements(at, calls.PAIR) == ["dtype"]
    j = policy.judge(tracks, _why_stopped(exp))
    assert (j.diagnosis.kind, j.diagnosis.culprit_ranks, j.diagnosis.details["differs_in"]) == (
        "collective_mismatch", [2], ["dtype"]), j.diagnosis.summary
    assert "rank 2 calls all_reduce(shape [4], float64)" in j.diagnosis.summary


def test_a_rank_whose_stuck_call_broke_as_the_sandbox_ended_the_run_is_hung_live_as_offline():
    """The sandbox ends a hung run's ranks one after another; a rank still blocked may first see its call raise
    "Connection closed by peer" and write that down. It was hung: live (ended by the sandbox) as offline."""
    def blocked(rank, broke):
        t = _track(rank, dict(AR, op="all_gather" if rank == 1 else "all_reduce"))
        if broke:
            t.feed({"ev": "exit", "rank": rank, "id": 1, "op": "all_gather", "t": 5.0,
                    "error": "RuntimeError: Connection closed by peer [127.0.0.1]:5"})
            t.feed({"ev": "end", "rank": rank, "outcome": "error", "t": 5.1,
                    "error": {"type": "RuntimeError", "message": "Connection closed by peer [127.0.0.1]:5"}})
        return t
    offline = {0: blocked(0, False), 1: blocked(1, True)}
    live = {0: blocked(0, False), 1: blocked(1, True)}
    for r, t in live.items():
        t.pid, t.ended_by_sandbox = 100 + r, True
    assert policy.judge(offline).outcomes == policy.judge(live, policy.HANG).outcomes == {0: "hung", 1: "hung"}
    # and its result says where it hung, without the teardown's error (seen under load: pending None)
    from sandbox.result import RankResult
    rr = RankResult.from_track(live[1], "hung")
    assert (rr.pending["op"], rr.pending["seq"], rr.error) == ("all_gather", AR["seq"], None)
    for ts in (live, offline):  # an error of its own, recorded: not hung, an error
        ts[1].end["error"]["message"] = "ValueError: bad batch"
    assert policy.judge(live, policy.HANG).outcomes[1] == policy.judge(offline).outcomes[1] == "error"


def test_a_rank_the_sandbox_ended_while_it_exited_is_judged_by_its_end_record_live_as_offline():
    """exit_code's run under load: rank 0 exits 3; ranks 1 and 2 see their barrier raise, write their error, and are
    still in their exit handlers a second later, when the failure rule ends them. Live they read 'stopped' and offline
    'error' (tests/test_offline.py, 3 times in 17 loaded runs): their own code had ended, so the end record decides."""
    barrier = {"op": "barrier", "gname": "0", "group": [0, 1, 2], "seq": 1}

    def tracks(live):
        ts = {0: _track(0), 1: _track(1, dict(barrier)), 2: _track(2, dict(barrier))}
        for r in (1, 2):
            ts[r].feed({"ev": "exit", "rank": r, "id": 1, "op": "barrier", "t": 3.0,
                        "error": "RuntimeError: Connection closed by peer"})
            ts[r].feed({"ev": "end", "rank": r, "outcome": "error", "t": 3.1,
                        "error": {"type": "RuntimeError", "message": "Connection closed by peer [127.0.0.1]:5"}})
        if live:
            for r, t in ts.items():
                t.pid, t.exit_code = 100 + r, 3 if r == 0 else None
                t.ended_by_sandbox = r != 0
        return ts
    want = {0: "crashed", 1: "error", 2: "error"}
    assert policy.judge(tracks(True), policy.FAILURE).outcomes == policy.judge(tracks(False)).outcomes == want
    # a rank that returned and was ended in its exit handlers finished: ok, as its end record says (its value is read)
    ts = tracks(True)
    ts[2] = _track(2)
    ts[2].feed({"ev": "end", "rank": 2, "outcome": "ok", "t": 3.1})
    ts[2].pid, ts[2].ended_by_sandbox = 102, True
    assert policy.judge(ts, policy.FAILURE).outcomes[2] == "ok"
    # one the sandbox ended before its code ended was stopped: in its call, or between the error and its record
    for r in (1, 2):
        ts = tracks(True)
        ts[r].end = None
        if r == 1:
            ts[r].feed({"ev": "enter", "rank": r, "id": 2, "t": 3.2, "op": "all_reduce", "gname": "0",
                        "group": [0, 1, 2], "seq": 2})
        assert policy.judge(ts, policy.FAILURE).outcomes[r] == "stopped"


def test_a_ddp_rank_past_its_last_step_is_not_hung_in_a_call_its_recorder_still_calls_scheduled():
    """Lab 12's cost cell (a correct DDP job, `step_times`) saw a rank's value None: the run had been called hung.
    At the end of the job gloo's recorder left the last gradient all_reduce (#3 here) 'scheduled' in both ranks'
    dumps, the finished ones included; rank 0 had exited, and rank 1, which had returned too, was still writing its
    last dump (a loaded machine held it there over a second). Judged from its dump, rank 1 sat in #3, which its
    exited peer could never complete: a hang. Every peer's part of #3 is done, so #3 cannot hold rank 1."""
    import pickle

    from sandbox import flight_view

    def entry(seq, state):
        return {"record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
                "p2p_seq_id": 0, "op_id": seq, "profiling_name": "gloo:all_reduce", "time_created_ns": int(seq * 1e9),
                "input_sizes": [[5]], "input_dtypes": ["Float"], "output_sizes": [[5]], "output_dtypes": ["Float"],
                "state": state, "is_p2p": False}

    def dump(*entries):
        return pickle.loads(pickle.dumps({"version": "2.10", "entries": list(entries), "pg_status": {"0": {
            "last_enqueued_collective": entries[-1]["collective_seq_id"], "last_started_collective": -1,
            "last_completed_collective": 2}}}))

    def tracks(rank0_finished=True):
        ts = {}
        for r in (0, 1):
            t = ts[r] = RankTrack(r)
            t.feed({"ev": "hello", "rank": r, "world_size": 2, "pid": 100 + r, "flight": True, "t": 0.0})
            t.feed({"ev": "enter", "rank": r, "id": 1, "t": 0.5, "op": "init_process_group", "gname": "0",
                    "group": [0, 1], "site": "job.py:5"})
            t.feed({"ev": "exit", "rank": r, "id": 1, "op": "init_process_group", "t": 0.6})
            t.pid = 100 + r
        if rank0_finished:
            ts[0].feed({"ev": "end", "rank": 0, "outcome": "ok", "t": 3.5})
            ts[0].exit_code = 0
        return ts

    S = policy.Settings()
    both = {r: dump(entry(1, "completed"), entry(2, "completed"), entry(3, "scheduled")) for r in (0, 1)}
    view = flight_view.merge(tracks(), both)
    assert view[1].pending is None
    assert policy.decide(view, 9.0, elapsed=9.0, quiet_s=5.0, failed_since=None, settings=S) is None
    # a peer alive after #3: rank 1 is shown in #3 as its dump says, and #3 can complete (that peer got through it)
    view = flight_view.merge(tracks(rank0_finished=False),
                             {0: dump(entry(1, "completed"), entry(2, "completed"), entry(3, "completed")),
                              1: both[1]})
    assert view[1].pending["seq"] == 3 and progress_possible(view)
    # the call a finished peer never made (an extra step on rank 1: ddp-uneven-inputs) still holds rank 1: a hang
    view = flight_view.merge(tracks(), {0: dump(entry(1, "completed"), entry(2, "completed")), 1: both[1]})
    assert view[1].pending["seq"] == 3 and view[1].pending["lens"] == "flight"
    d = policy.decide(view, 9.0, elapsed=9.0, quiet_s=5.0, failed_since=None, settings=S)
    assert d is not None and d.stop == policy.HANG


def test_of_two_camps_as_large_the_one_making_a_call_the_others_never_made_is_named():
    """A callback registered on rank 0 only all_reduces between two steps: at call #2 rank 0 is in the callback's
    all_reduce (a line rank 1 never reached) and rank 1 in the next step's (a line rank 0 made as call #1). Rank 0
    went off the common path, whatever its number; with no such call, the old tie rule stands."""
    step = {**AR, "shapes": [[8]], "site": "job.py:20"}
    for odd in (0, 1):
        tracks = {r: RankTrack(r) for r in (0, 1)}
        for r, t in tracks.items():
            t.feed({"ev": "hello", "rank": r, "world_size": 2, "t": 0.0})
            t.feed({"ev": "enter", "rank": r, "id": 1, "t": 1.0, **step})
            _done(t, 1)
            second = {**AR, "shapes": [[1]], "site": "job.py:9"} if r == odd else step
            t.feed({"ev": "enter", "rank": r, "id": 2, "t": 10.0, **second, "seq": 2})
        d = diagnose_hang(tracks)
        assert (d.kind, d.culprit_ranks, d.site) == ("collective_mismatch", [odd], "job.py:9"), d.summary
