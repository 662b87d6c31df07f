"""Mistakes an audit planted in the judge that no test caught, and the classes around them, on hand-made tracks (the
judge is a pure function: no ranks are started here, each test takes milliseconds).

- Every wording that depends on a direction says the right one both ways: a rank that ran more steps and one that ran
  fewer, send and recv, to and from, sent and received, before and after, the `if` and its else.
- Every culprit list names the right ranks, both sides of a pair where a pair is at fault.
- A fault the run cannot inject is refused: a link-down of 0 s, a kill with a duration.
"""
import pytest

from sandbox import faults, words
from sandbox._run import options
from sandbox.contracts import breaches
from sandbox.diagnose import diagnose_hang, diagnose_timeout
from sandbox.diagnose.hang import busy_at_timeout
from sandbox.events import RankTrack
from sandbox.launcher import UsageError

GROUP4 = [0, 1, 2, 3]


def _rank(rank, world, calls, *, returned=0, end=None):
    """A rank's track: `calls` entered in order (ids from 1, a second apart), the first `returned` of them returned;
    `end`: "ok" for a rank whose code finished (exit code 0)."""
    t = RankTrack(rank)
    t.feed({"ev": "hello", "rank": rank, "world_size": world, "t": 0.0})
    for i, c in enumerate(calls, start=1):
        t.feed({"ev": "enter", "rank": rank, "id": i, "t": float(i), "site": c.get("site", f"job.py:{10 + i}"),
                **{k: v for k, v in c.items() if k != "site"}})
        if i <= returned:
            t.feed({"ev": "exit", "rank": rank, "id": i, "t": i + 0.5})
    if end == "ok":
        t.feed({"ev": "end", "rank": rank, "outcome": "ok", "exit_code": 0, "t": len(calls) + 1.0})
        t.exit_code = 0
    return t


# ------------------------------------------------------------------------------------------ uneven steps: more, fewer

def _grads(n, site="train.py:17"):
    """n gradient all_reduces of DDP's backward, as the Flight Recorder lens records them."""
    return [{"op": "all_reduce", "lens": "flight", "via": "backward()", "gname": "0", "group": GROUP4, "seq": s,
             "shapes": [[9]], "dtypes": ["float32"], "site": site} for s in range(1, n + 1)]


def _uneven(steps: dict[int, int], site="train.py:17"):
    """Ranks that made steps[r] gradient all_reduces: those with the most are stuck in their last one (no partner),
    the others finished."""
    most = max(steps.values())
    return {r: _rank(r, 4, _grads(n, site), returned=n - (n == most), end=None if n == most else "ok")
            for r, n in steps.items()}


def test_a_rank_that_ran_more_steps_is_said_to_have_run_more():
    d = diagnose_hang(_uneven({0: 3, 1: 3, 2: 3, 3: 4}))
    assert (d.kind, d.culprit_ranks) == ("uneven_steps", [3]), d.summary
    assert d.summary.startswith("Rank 3 ran more training steps than ranks 0-2:"), d.summary
    assert "(ranks 0-2 made 3; rank 3 made 4)" in d.summary, d.summary


def test_a_rank_that_ran_fewer_steps_is_said_to_have_run_fewer():
    """The odd rank is the one behind: ranks 0-2 wait in a fourth all_reduce that rank 3, done after three, never
    makes. It ran fewer steps, and the sentence must say so."""
    d = diagnose_hang(_uneven({0: 4, 1: 4, 2: 4, 3: 3}))
    assert (d.kind, d.culprit_ranks) == ("uneven_steps", [3]), d.summary
    assert d.summary.startswith("Rank 3 ran fewer training steps than ranks 0-2:"), d.summary
    assert "ran more" not in d.summary and "(rank 3 made 3; ranks 0-2 made 4)" in d.summary, d.summary
    assert "rank 0's all_reduce #4 of group [0, 1, 2, 3] (9 elements) has no partner" in d.summary, d.summary


ACCUMULATING = """\
import contextlib


def train(model, batches, every):
    for i, batch in enumerate(batches):
        with model.no_sync() if (i + 1) % every else contextlib.nullcontext():
            loss = model(batch).sum()
            loss.backward()
"""


@pytest.mark.parametrize("steps, said", [({0: 3, 1: 3, 2: 3, 3: 4}, "more"), ({0: 4, 1: 4, 2: 4, 3: 3}, "less")])
def test_a_loop_that_accumulates_says_which_way_the_odd_rank_left_no_sync(tmp_path, steps, said):
    path = tmp_path / "accumulate.py"
    path.write_text(ACCUMULATING)
    d = diagnose_hang(_uneven(steps, site=f"{path}:8"))
    assert (d.kind, d.culprit_ranks) == ("uneven_steps", [3]), d.summary
    assert d.summary.startswith(f"Rank 3 left DDP's no_sync() {said} often than ranks 0-2:"), d.summary
    assert "`loss.backward()` at" in d.summary, d.summary


# ------------------------------------------------------------------------------------------ point to point: both sides

SEND_TO_1 = {"op": "send", "peer": 1, "site": "job.py:5"}
RECV_FROM_0 = {"op": "recv", "peer": 0, "site": "job.py:6"}


@pytest.mark.parametrize("waiting, needs", [(0, "every send needs a recv from its peer"),
                                            (1, "every recv needs a send from its peer")])
def test_an_unmatched_send_or_recv_names_the_waiting_rank_and_its_peer(waiting, needs):
    """One rank waits in a send (or recv); its peer finished without the matching call. Both are culprits: the
    fix is on either side of the pair."""
    tracks = {waiting: _rank(waiting, 2, [SEND_TO_1 if waiting == 0 else RECV_FROM_0]),
              1 - waiting: _rank(1 - waiting, 2, [], end="ok")}
    d = diagnose_hang(tracks)
    assert (d.kind, d.culprit_ranks) == ("p2p_unmatched", [0, 1]), d.summary
    call = "send to rank 1 at job.py:5" if waiting == 0 else "recv from rank 0 at job.py:6"
    said = f"rank {waiting} waits in {call}, but rank {1 - waiting} is already finished (exit 0)"
    assert said in d.summary, d.summary
    assert needs in d.summary, d.summary


def test_a_chain_of_waits_names_its_last_link_and_who_waits_behind_it():
    """Rank 0 receives from rank 1, which sends to rank 2, which finished: the pair at fault is 1 and 2."""
    tracks = {0: _rank(0, 3, [{"op": "recv", "peer": 1, "site": "job.py:7"}]),
              1: _rank(1, 3, [{"op": "send", "peer": 2, "site": "job.py:8"}]),
              2: _rank(2, 3, [], end="ok")}
    d = diagnose_hang(tracks)
    assert (d.kind, d.culprit_ranks) == ("p2p_unmatched", [1, 2]), d.summary
    assert "rank 1 waits in send to rank 2 at job.py:8" in d.summary, d.summary
    assert "Rank 0 waits behind it: rank 0 in recv from rank 1 at job.py:7." in d.summary, d.summary


@pytest.mark.parametrize("op, why", [("send", "a gloo send does not complete until the peer posts the matching recv"),
                                     ("recv", "each waits for a message the other will only send")])
def test_a_cycle_of_three_names_every_rank_in_it(op, why):
    tracks = {r: _rank(r, 3, [{"op": op, "peer": (r + 1) % 3}]) for r in range(3)}
    d = diagnose_hang(tracks)
    assert (d.kind, d.culprit_ranks) == ("p2p_cycle", [0, 1, 2]), d.summary
    assert why[0].upper() + why[1:] in d.summary, d.summary
    word = "to" if op == "send" else "from"
    assert f"rank 0 blocks in {op} {word} rank 1" in d.summary, d.summary


def _p2p(rank, ops, end="ok"):
    """A rank whose point-to-point calls all returned: ops as (op, peer, tag)."""
    return _rank(rank, 2, [{"op": op, "peer": peer, "tag": tag, "site": f"p2p.py:{op}"} for op, peer, tag in ops],
                 returned=len(ops), end=end)


def test_a_send_never_received_names_both_ranks_and_says_who_sent():
    tracks = {0: _p2p(0, [("send", 1, 0), ("send", 1, 0)]), 1: _p2p(1, [("recv", 0, 0)])}
    [w] = [w for w in breaches(tracks) if w.kind == "p2p_unmatched"]
    assert w.ranks == [0, 1], w
    assert w.summary.startswith("Rank 0 sent 2 messages to rank 1 (at p2p.py:send) but rank 1 received 1: 1 never"
                                " received."), w.summary


def test_a_recv_never_matched_names_both_ranks_and_says_who_received():
    tracks = {0: _p2p(0, [("send", 1, 0)]), 1: _p2p(1, [("recv", 0, 0), ("recv", 0, 0)])}
    [w] = [w for w in breaches(tracks) if w.kind == "p2p_unmatched"]
    assert w.ranks == [0, 1], w
    assert w.summary.startswith("Rank 1 posted 2 receives from rank 0 (at p2p.py:recv) but rank 0 sent 1: 1 never"
                                " matched."), w.summary


def test_sends_and_receives_on_different_tags_name_the_sender_and_the_receiver():
    tracks = {0: _p2p(0, [("recv", 1, 3)]), 1: _p2p(1, [("send", 0, 4)])}
    [w] = [w for w in breaches(tracks) if w.kind == "p2p_unmatched"]
    assert w.ranks == [1, 0], w  # [sender, receiver]
    assert "Rank 1's sends to rank 0 and rank 0's receives from it do not agree on tags: sent with tags [4]" in \
        w.summary, w.summary


def test_two_ranks_that_each_sent_first_are_both_named():
    tracks = {r: _p2p(r, [("send", 1 - r, 0), ("recv", 1 - r, 0)]) for r in (0, 1)}
    [w] = [w for w in breaches(tracks) if w.kind == "send_cycle"]
    assert w.ranks == [0, 1] and w.summary.startswith("Ranks 0 and 1 each sent to the other before receiving"), w


@pytest.mark.parametrize("op, word", [("isend", "to"), ("irecv", "from")])
def test_a_request_never_waited_on_names_its_own_rank_and_which_way_it_went(op, word):
    t = _rank(0, 2, [{"op": op, "peer": 1, "async": True, "site": "job.py:3"}], returned=1, end="ok")
    [w] = [w for w in breaches({0: t, 1: _rank(1, 2, [], end="ok")}) if w.kind == "async_unwaited"]
    assert w.ranks == [0] and w.summary.startswith(f"Rank 0's {op} {word} rank 1 at job.py:3 was never waited"), w


@pytest.mark.parametrize("op, word", [("send", "to"), ("isend", "to"), ("send_object_list", "to"), ("recv", "from"),
                                      ("irecv", "from"), ("recv_object_list", "from")])
def test_a_point_to_point_call_says_which_way_it_goes(op, word):
    assert words.call({"op": op, "peer": 3}) == f"{op} {word} rank 3"


def test_splits_say_what_a_rank_sends_and_what_it_receives():
    """Rank 0 sends 3 elements to rank 1, which expects 5 from it; the other way they agree (2 and 2)."""
    calls = {0: {"op": "all_to_all_single", "gname": "0", "group": [0, 1], "seq": 1, "rank": 0, "shapes": [[4]],
                 "dtypes": ["float32"], "splits": [[1, 3], [1, 2]], "site": "moe.py:9"},
             1: {"op": "all_to_all_single", "gname": "0", "group": [0, 1], "seq": 1, "rank": 1, "shapes": [[7]],
                 "dtypes": ["float32"], "splits": [[2, 2], [5, 2]], "site": "moe.py:9"}}
    assert words.signature(calls[0]) == "all_to_all_single(shape [4], float32, sends [1, 3], receives [1, 2])"
    hung = {r: _rank(r, 2, [c]) for r, c in calls.items()}
    assert "rank 0 sends 3 elements to rank 1, which expects 5" in diagnose_hang(hung).summary
    done = {r: _rank(r, 2, [c], returned=1, end="ok") for r, c in calls.items()}
    [w] = [w for w in breaches(done) if w.kind == "collective_differs"]
    assert "rank 0 sends 3 elements to rank 1, which expects 5" in w.summary and w.details["odd_ranks"] == [0], w


# ------------------------------------------------------------------------------------------ before, after; busy

def test_a_straggler_at_the_timeout_is_the_busy_rank_not_the_waiting_one():
    busy = _rank(0, 2, [{"op": "barrier", "gname": "0", "group": [0, 1], "seq": 1}], returned=1)
    waiting = _rank(1, 2, [{"op": "barrier", "gname": "0", "group": [0, 1], "seq": 1},
                           {"op": "barrier", "gname": "0", "group": [0, 1], "seq": 2}], returned=1)
    d = diagnose_timeout({0: busy, 1: waiting}, 30.0)
    assert (d.kind, d.culprit_ranks) == ("straggler", [0]), d.summary
    assert d.summary.startswith("Not a deadlock: rank 0 was busy in its own code when the 30 s timeout passed, while"
                                " rank 1 waited in barrier #2"), d.summary


def test_a_rank_busy_past_the_groups_timeout_is_said_between_its_call_before_and_its_call_after():
    """Rank 1 timed out at t=5 in barrier #2; rank 0 had returned from barrier #1 at t=1.5 and reached barrier #2 at
    t=6: 'after' the first, the second '1.0 s later'."""
    bar = {"op": "barrier", "gname": "0", "group": [0, 1]}
    slow = _rank(0, 2, [dict(bar, seq=1, site="ckpt.py:10")], returned=1)
    slow.feed({"ev": "enter", "rank": 0, "id": 2, "t": 6.0, "site": "ckpt.py:12", **bar, "seq": 2})
    timed = _rank(1, 2, [dict(bar, seq=1, site="ckpt.py:10"), dict(bar, seq=2, site="ckpt.py:12")], returned=1)
    timed.feed({"ev": "exit", "rank": 1, "id": 2, "t": 5.0, "error": "Timed out waiting 2000ms for recv operation"})
    timed.feed({"ev": "end", "rank": 1, "outcome": "error", "exit_code": 1, "t": 5.1,
                "error": {"type": "DistBackendError", "message": "Timed out waiting 2000ms for recv operation"}})
    d = busy_at_timeout({0: slow, 1: timed}, {0: "hung", 1: "error"})
    assert (d.kind, d.culprit_ranks) == ("straggler", [0]), d
    assert ("rank 0 was running its own code after barrier #1 of group [0, 1] at ckpt.py:10 had returned; it reached"
            " barrier #2 of group [0, 1] at ckpt.py:12 1.0 s later") in d.summary, d.summary


# ------------------------------------------------------------------------------------------ faults the run cannot have

def _faults_refused(fault) -> str | None:
    """The sentence each checker gives (faults.check for torchrun's launcher, options.check_faults for the
    sandbox's), which must be the same; None when the fault is accepted."""
    said = faults.check([fault], 2, 4)
    try:
        options.check_faults([fault], 4, 2)
    except UsageError as e:
        assert str(e) == said
        return said
    assert said is None
    return None


@pytest.mark.parametrize("fault", [faults.Fault(kind="link-down", node=1, at_s=1.0, for_s=0.0),
                                   faults.Fault(kind="link-down", node=1, at_s=1.0, for_s=-2.0),
                                   faults.Fault(kind="link-down", node=1, at_s=1.0),
                                   faults.Fault(kind="link-down", node=1, at_s=1.0, for_s=float("inf")),
                                   faults.parse("link-down", "1@3s+0s")],
                         ids=["zero-seconds", "negative", "no-duration", "forever", "command-line-zero-seconds"])
def test_a_link_down_must_last_more_than_0_s(fault):
    said = _faults_refused(fault)
    assert said is not None and "a link-down fault lasts for_s=SECONDS (more than 0)" in said, said


@pytest.mark.parametrize("for_s", [2.0, 0.0])
def test_a_kill_has_no_duration(for_s):
    said = _faults_refused(faults.Fault(kind="kill", node=1, at_s=1.0, for_s=for_s))
    assert said is not None and "only a link-down has a duration" in said, said


@pytest.mark.parametrize("fault", [faults.Fault(kind="kill", node=1, at_s=float("nan")),
                                   faults.Fault(kind="kill", node=1, at_s="3"),
                                   faults.Fault(kind="kill", node=1, at_s=-1.0)], ids=["nan", "text", "negative"])
def test_a_time_that_is_no_number_of_seconds_is_refused(fault):
    said = _faults_refused(fault)
    assert said is not None and said.startswith("a fault fires at_s=SECONDS (0 or more)"), said


@pytest.mark.parametrize("fault", [faults.Fault(kind="kill", node=1, at_s=0.0),
                                   faults.Fault(kind="kill", node=1, at_call=(2, 1)),
                                   faults.Fault(kind="link-down", node=1, at_s=1.0, for_s=0.5),
                                   faults.parse("link-down", "1@3s+5s"), faults.parse("kill", "0@rank3:4")])
def test_the_faults_a_run_can_have_are_accepted(fault):
    assert _faults_refused(fault) is None


@pytest.mark.parametrize("kind, text", [("kill", "1@3s+5s"), ("link-down", "1@3s"), ("link-down", "1@rank2:0+1s")])
def test_the_command_line_forms_without_or_with_a_wrong_duration_are_refused(kind, text):
    with pytest.raises(ValueError, match=f"a --{'kill-node' if kind == 'kill' else kind} fault reads"):
        faults.parse(kind, text)


# ------------------------------------------------------------------------------------------ a hung job torn down

def _torn_down(raised_then_killed: bool):
    """Offline, two torchrun workers in a send/recv cycle, ended by their launchers: rank 1 still inside its send;
    rank 0's send raised because rank 1's side went away, and rank 0 was then killed before its error record
    (`raised_then_killed`), or it went on to a later call of its own first."""
    from sandbox.policy import judge

    send = {"op": "send", "peer": 1, "shapes": [[4]], "dtypes": ["float32"]}
    r0 = _rank(0, 2, [{"op": "init_process_group"}, send], returned=1)
    r0.feed({"ev": "exit", "rank": 0, "id": 2, "t": 3.0, "error": "RuntimeError: Connection closed by peer [::1]:5"})
    if not raised_then_killed:
        r0.feed({"ev": "enter", "rank": 0, "id": 3, "t": 4.0, "site": "job.py:40", "op": "barrier", "gname": "0",
                 "group": [0, 1], "seq": 1})
        r0.feed({"ev": "exit", "rank": 0, "id": 3, "t": 4.5})
    r1 = _rank(1, 2, [{"op": "init_process_group"}, {**send, "peer": 0}], returned=1)
    return judge({0: r0, 1: r1})


def test_a_rank_killed_between_its_lost_peer_error_and_its_error_record_was_hung_too():
    """Seen under plain torchrun (test_torchrun's two nodes): the teardown of a hung job reached rank 0 after its
    stuck send raised and before its own error record, and the job read as a crash of rank 0."""
    j = _torn_down(raised_then_killed=True)
    assert j.outcomes == {0: "hung", 1: "hung"} and j.verdict == "hang", (j.outcomes, j.diagnosis.summary)
    # a rank that went on after the error (it caught it) and then died was not stuck in that call: still a crash
    j = _torn_down(raised_then_killed=False)
    assert j.outcomes[0] == "crashed" and j.verdict == "crash", (j.outcomes, j.diagnosis.summary)


# ------------------------------------------------------------------- a rank still inside the call is not missing

def test_a_rank_still_inside_the_call_when_the_run_ended_is_not_named_missing():
    """Rank 0 finished; ranks 1 and 3 raised in the barrier when its connection closed; rank 2 was still inside the
    barrier when the run ended (seen with torch 2.11: its error had not come yet). Only rank 0 never arrived."""
    from sandbox.diagnose import diagnose_failure

    barrier = [{"op": "barrier", "gname": "0", "group": GROUP4, "seq": 1, "site": "job.py:9"}]
    tracks = {0: _rank(0, 4, [], end="ok"), 2: _rank(2, 4, barrier)}
    for r in (1, 3):
        t = tracks[r] = _rank(r, 4, barrier)
        lost = {"type": "RuntimeError", "message": "Connection closed by peer [127.0.0.1]:3808"}
        t.feed({"ev": "exit", "rank": r, "id": 1, "t": 2.0, "error": f"RuntimeError: {lost['message']}"})
        t.feed({"ev": "end", "rank": r, "outcome": "error", "error": lost, "t": 3.0})
    d = diagnose_failure(tracks, {0: "ok", 1: "error", 2: "stopped", 3: "error"})
    assert (d.kind, d.culprit_ranks) == ("missing_ranks", [0]), d.summary
    assert d.summary.startswith("Ranks 1-3 wait in barrier #1"), d.summary
