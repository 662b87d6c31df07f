"""The call contract (sandbox.calls) on hand-written call dicts, field by field and level by level; and that the
hang rule, the mismatch rule and the contracts, which all ask it, agree on a call that differs only in dtype.
No ranks are started here (test_calls_live.py runs the same cases on real gloo ranks)."""
import pytest

from sandbox import calls, policy
from sandbox.calls import FULL, PAIR
from sandbox.contracts import breaches
from sandbox.diagnose import diagnose_failure, diagnose_hang, progress_possible, provable_deadlock
from sandbox.events import RankTrack

AR = {"op": "all_reduce", "gname": "0", "group": [0, 1, 2], "seq": 1, "shapes": [[4]], "dtypes": ["float32"],
      "redop": "SUM"}


def _three(change: dict, base: dict = AR, odd: int = 2) -> dict[int, dict]:
    """The same call on ranks 0-2, rank `odd` with `change` applied."""
    return {r: {**base, "rank": r, **(change if r == odd else {})} for r in range(3)}


# field -> (the change, differs at PAIR, differs at FULL)
FIELDS = {
    "dtype": ({"dtypes": ["float64"]}, True, True),
    "shape": ({"shapes": [[6]]}, True, True),
    "op": ({"op": "all_gather", "redop": None}, True, True),  # an all_gather has no reduce op: not named beside
    "group": ({"group": [0, 1]}, True, True),
    "reduce op": ({"redop": "MAX"}, False, True),
}


@pytest.mark.parametrize("level", [PAIR, FULL])
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_each_field_at_each_level(field, level):
    change, at_pair, at_full = FIELDS[field]
    differs = at_pair if level == PAIR else at_full
    three = _three(change)
    assert calls.disagreements(three, level) == ([field] if differs else [])
    assert calls.matches(three[0], three[2], level) is not differs
    assert calls.matches(three[0], three[1], level)  # the two alike always match
    assert calls.odd_ones(three, level) == ([2] if differs else [])
    assert calls.camps(three, level) == ([[0, 1], [2]] if differs else [[0, 1, 2]])


@pytest.mark.parametrize("level", [PAIR, FULL])
def test_a_root_differs_at_every_level(level):
    bc = {"op": "broadcast", "gname": "0", "group": [0, 1, 2], "seq": 1, "root": 0, "shapes": [[4]],
          "dtypes": ["float32"]}
    three = _three({"root": 1}, bc, odd=0)
    assert calls.disagreements(three, level) == ["root"]
    assert calls.odd_ones(three, level) == [0]
    # a different op explains the rest: the root is not named beside it
    assert calls.disagreements(_three({"op": "reduce", "root": 1}, bc), level) == ["op"]


@pytest.mark.parametrize("level", [PAIR, FULL])
@pytest.mark.parametrize("op", sorted(calls.UNEVEN))
def test_uneven_ops_may_differ_in_shape_but_never_in_dtype(op, level):
    """The hang rule once ignored the dtypes of gather, scatter, all_to_all and all_to_all_single while the mismatch
    rule compared them: one function now says it, at both levels."""
    base = {**AR, "op": op, "redop": None}
    assert calls.disagreements(_three({"shapes": [[9]]}, base), level) == []
    assert calls.disagreements(_three({"dtypes": ["int64"]}, base), level) == ["dtype"]


def _a2a(sent: dict[int, list[int]], got: dict[int, list[int]]) -> dict[int, dict]:
    return {r: {"op": "all_to_all_single", "gname": "0", "group": [0, 1, 2], "seq": 1, "rank": r,
                "shapes": [[sum(sent[r])]], "dtypes": ["float32"], "splits": [sent[r], got[r]]} for r in sent}


@pytest.mark.parametrize("level", [PAIR, FULL])
def test_splits_must_pair_up(level):
    # rank r sends r + 1 elements to every peer: each receives 1, 2 and 3, whatever its own input's size
    sent = {r: [r + 1] * 3 for r in range(3)}
    good = _a2a(sent, {r: [1, 2, 3] for r in range(3)})
    assert calls.disagreements(good, level) == [] and calls.matches(good[0], good[2], level)
    # rank 2 expects 5 elements from rank 0, who sends 1
    bad = _a2a(sent, {0: [1, 2, 3], 1: [1, 2, 3], 2: [5, 2, 3]})
    assert calls.disagreements(bad, level) == ["splits"]
    assert not calls.matches(bad[0], bad[2], level) and calls.matches(bad[0], bad[1], level)
    assert calls.odd_ones(bad, level) == [0, 2]  # the pair that disagrees: neither stands out
    bad[1]["splits"] = [[2, 2, 7], [1, 2, 3]]  # and rank 1 sends rank 2 seven: rank 2 disagrees with both
    assert calls.odd_ones(bad, level) == [2] and calls.camps(bad, level) == [[0, 1], [2]]


def test_a_wait_stands_for_its_call_and_json_lists_equal_tuples():
    waiting = {"op": "wait", "of": "all_reduce", **{k: v for k, v in AR.items() if k != "op"}}
    assert calls.matches(waiting, AR, FULL)
    assert calls.matches({**AR, "shapes": ((4,),), "group": (0, 1, 2)}, AR, FULL)


def test_an_unknown_level_is_refused():
    with pytest.raises(ValueError, match="level must be one of"):
        calls.key(AR, "strict")


def test_the_op_tables_agree():
    assert calls.SENDS == {"send", "isend", "send_object_list"}
    assert calls.RECVS == {"recv", "irecv", "recv_object_list"}
    assert calls.UNEVEN == {"all_to_all", "all_to_all_single", "gather", "scatter"}
    assert calls.OBJECT_COLLECTIVES == {"all_gather_object", "gather_object", "broadcast_object_list",
                                        "scatter_object_list"}
    assert calls.COLLECTIVES >= calls.UNEVEN | calls.OBJECT_COLLECTIVES and not calls.COLLECTIVES & calls.SENDS
    for name in ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor"):
        assert calls.OPS[name].redop == "op", name


# ------------------------------------------------------------------------------------------ every user agrees

def _tracks(calls_by_rank: dict[int, dict], *, returned: bool) -> dict[int, RankTrack]:
    """Each rank's track with its call entered (and, if `returned`, finished and the rank ended)."""
    out = {}
    for r, p in calls_by_rank.items():
        t = out[r] = RankTrack(r)
        t.feed({"ev": "hello", "rank": r, "world_size": len(calls_by_rank), "t": 0.0})
        t.feed({"ev": "enter", "rank": r, "id": 1, "t": 1.0 + r / 10, "site": f"job.py:{7 if r != 2 else 9}", **p})
        if returned:
            t.feed({"ev": "exit", "rank": r, "id": 1, "op": p["op"], "t": 2.0})
            t.feed({"ev": "end", "rank": r, "outcome": "ok", "exit_code": 0, "t": 3.0})
    return out


@pytest.mark.parametrize("op", ["all_reduce", "gather", "all_to_all_single"])
def test_a_dtype_only_difference_is_one_verdict_for_every_rule(op):
    """Rank 2's call differs only in dtype. The hang rule cannot pair it (a provable deadlock), the mismatch rule
    names rank 2 and the dtype, a failed run is called a mismatch (not rank_crashed), and once such a call
    completed the contracts warn naming rank 2."""
    three = _three({"dtypes": ["float64"]}, {**AR, "op": op, "redop": "SUM" if op == "all_reduce" else None})
    hung = _tracks(three, returned=False)
    assert not progress_possible(hung) and provable_deadlock(hung)
    d = diagnose_hang(hung)
    assert (d.kind, d.culprit_ranks, d.details["differs_in"]) == ("collective_mismatch", [2], ["dtype"]), d.summary
    assert "rank 2 calls" in d.summary and "float64" in d.summary and "The dtype must be the same" in d.summary
    # gloo aborts rank 2 (SIGABRT) on the size it did not expect: the crash is still named as the mismatch
    hung[2].exit_code, hung[2].pid = -6, 12
    f = diagnose_failure(hung, {0: "hung", 1: "hung", 2: "crashed"})
    assert (f.kind, f.culprit_ranks) == ("collective_mismatch", [2]), f.summary
    done = _tracks(three, returned=True)
    j = policy.judge(done)
    assert j.verdict == "ok"
    [w] = [w for w in j.warnings if w.kind == "collective_differs"]
    assert (w.details["differs_in"], w.details["odd_ranks"]) == (["dtype"], [2]) and "rank 2 called" in w.summary


def test_a_reduce_op_difference_completes_and_is_only_a_contract_breach():
    three = _three({"redop": "MAX"})
    assert progress_possible(_tracks(three, returned=False))  # gloo pairs a SUM with a MAX: not a hang
    [w] = [w for w in breaches(_tracks(three, returned=True)) if w.kind == "collective_differs"]
    assert w.details["differs_in"] == ["reduce op"] and "all_reduce(shape [4], float32, MAX)" in w.summary


def test_splits_that_do_not_pair_up_are_named_as_a_mismatch_of_the_rank_that_stands_out():
    sent = {r: [r + 1] * 3 for r in range(3)}
    bad = _a2a(sent, {0: [1, 2, 3], 1: [1, 2, 3], 2: [5, 2, 3]})
    bad[1]["splits"] = [[2, 2, 7], [1, 2, 3]]
    hung = _tracks(bad, returned=False)
    assert not progress_possible(hung) and provable_deadlock(hung)
    d = diagnose_hang(hung)
    assert (d.kind, d.culprit_ranks, d.details["differs_in"]) == ("collective_mismatch", [2], ["splits"]), d.summary
    assert "rank 2 calls all_to_all_single(shape [9], float32, sends [3, 3, 3], receives [5, 2, 3])" in d.summary
    assert "What each rank sends to a peer must be what that peer expects to receive from it" in d.summary


def test_the_op_families_are_the_op_tables_and_every_form_is_in_its_family():
    """One op table decides the families (`calls.Op.synced`, `.family`); the rules read them there. A form added to
    the table is in its family by its name, and a rule's own list (origins once missed all_gather_single) is gone."""
    from sandbox.diagnose import origins, sharding

    assert origins.SYNCS is calls.SYNCED and (sharding.GATHERS, sharding.SCATTERS) == (calls.ALL_GATHERS,
                                                                                       calls.REDUCE_SCATTERS)
    for name in calls.OPS:
        assert (name in calls.ALL_GATHERS) == (name.startswith("all_gather") and name != "all_gather_object"), name
        assert (name in calls.REDUCE_SCATTERS) == name.startswith("reduce_scatter"), name
    assert calls.ALL_GATHERS <= calls.SYNCED and not calls.REDUCE_SCATTERS & calls.SYNCED
    assert {"all_reduce", "broadcast", "all_gather_object", "broadcast_object_list"} <= calls.SYNCED
    assert not {"reduce", "gather", "scatter", "all_to_all", "all_to_all_single", "send"} & calls.SYNCED
