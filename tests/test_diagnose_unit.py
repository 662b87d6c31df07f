"""The diagnosis alone, on traces recorded from real runs (tests/record_traces.py) and on small hand-made traces:
no ranks are started here."""
import copy
import json
import os

import pytest

from sandbox.diagnose import (RankTrack, diagnose_failure, diagnose_hang, judge_offline, load_dir,
                              progress_possible, short)

TRACES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traces")
RECORDED = sorted(os.listdir(TRACES))


def _load(name):
    d = os.path.join(TRACES, name)
    tracks = load_dir(d)
    meta = json.load(open(os.path.join(d, "meta.json")))
    for r, info in meta["ranks"].items():
        tracks[int(r)].exit_code, tracks[int(r)].outcome = info["exit_code"], info["outcome"]
    return tracks, meta


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_trace_gives_the_live_verdict(name):
    tracks, meta = _load(name)
    if meta["verdict"] == "hang":
        d = diagnose_hang(tracks)
    elif meta["verdict"] in ("crash", "error"):
        d = diagnose_failure(tracks)
    else:
        assert all(t.pending is None and t.end["outcome"] == "ok" for t in tracks.values())
        return
    assert (d.kind, d.culprit_ranks) == (meta["kind"], meta["culprit_ranks"]), d.summary


@pytest.mark.parametrize("name", [n for n in RECORDED if json.load(open(os.path.join(TRACES, n, "meta.json")))["verdict"] == "hang"])
def test_recorded_hang_is_not_progressable(name):
    tracks, _ = _load(name)
    for t in tracks.values():
        t.outcome, t.exit_code = None, None  # as the watchdog saw them: alive, blocked
    assert not progress_possible(tracks)


@pytest.mark.parametrize("name", ["op_mismatch", "send_cycle", "missing_rank"])
def test_offline_judgement_from_files_alone(name):
    tracks = load_dir(os.path.join(TRACES, name))  # no exit codes: as from torchrun
    meta = json.load(open(os.path.join(TRACES, name, "meta.json")))
    verdict, d, outcomes = judge_offline(tracks)
    assert (verdict, d.kind, d.culprit_ranks) == ("hang", meta["kind"], meta["culprit_ranks"])
    assert set(outcomes.values()) == {"hung"}


def test_fixing_the_odd_rank_makes_the_mismatch_go_away():
    tracks, _ = _load("op_mismatch")
    for t in tracks.values():
        t.outcome, t.exit_code = None, None
    odd = tracks[1].pending
    good = tracks[0].pending
    for k in ("op", "sig", "shapes", "dtypes", "root"):  # rank 1 now calls what the others call
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


AR = {"op": "all_reduce", "gname": "0", "group": [0, 1], "seq": 1, "sig": "all_reduce|None|[[4]]|['float32']",
      "shapes": [[4]], "dtypes": ["float32"]}


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
    bc = {"op": "broadcast", "gname": "0", "group": [0, 1], "seq": 1, "root": 0, "sig": "broadcast|0|[[4]]|['float32']"}
    root = _track(0, bc, {"op": "send", "peer": 1})
    _done(root, 1)  # the root's broadcast returned, it went on to a send
    other = _track(1, bc)  # still receiving the broadcast: it can finish, then take the send
    assert progress_possible({0: root, 1: other})
    other2 = _track(1, dict(bc, sig="broadcast|0|[[8]]|['float32']"))  # but not a different broadcast
    assert not progress_possible({0: root, 1: other2})


def test_send_and_recv_with_different_tags_never_match():
    tracks = {0: _track(0, {"op": "send", "peer": 1, "tag": 1}), 1: _track(1, {"op": "recv", "peer": 0, "tag": 2})}
    assert not progress_possible(tracks)
    d = diagnose_hang(tracks)
    assert d.kind == "p2p_cycle" and "different tags" in d.summary
