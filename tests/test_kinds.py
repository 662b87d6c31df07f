"""Every diagnosis kind, produced by real gloo ranks (no mocks): the verdict, the kind and the culprit."""
import os
import socket

import pytest

import scenarios
from sandbox import launch


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CASES = [
    # fn, world size, verdict, kind, culprits
    (scenarios.op_mismatch, 3, "hang", "collective_mismatch", [1]),
    (scenarios.missing_rank, 3, "hang", "missing_ranks", [1]),
    (scenarios.groups_cycle, 3, "hang", "wait_cycle", [1]),
    (scenarios.exits_early, 3, "error", "missing_ranks", [2]),
    (scenarios.group_order, 3, None, "group_mismatch", [0]),
    (scenarios.group_lists, 3, "hang", "group_mismatch", [0]),
    (scenarios.send_cycle, 2, "hang", "p2p_cycle", [0, 1]),
    (scenarios.ring_cycle, 3, "hang", "p2p_cycle", [0, 1, 2]),
    (scenarios.tag_mismatch, 2, "hang", "p2p_unmatched", [0, 1]),
    (scenarios.crash_in_call, 3, "crash", "rank_crashed", [1]),
    (scenarios.exit_code, 3, "crash", "rank_crashed", [0]),
    (scenarios.raises, 3, "error", "rank_error", [2]),
]


@pytest.mark.parametrize("fn,n,verdict,kind,culprits", CASES, ids=[c[0].__name__ for c in CASES])
def test_kind(fn, n, verdict, kind, culprits, clean):
    res = launch(fn, world_size=n, timeout=30)
    assert res.diagnosis.kind == kind, res.diagnosis.summary
    if verdict is not None:
        assert res.verdict == verdict, res.diagnosis.summary
    else:  # the group-order hang ends in a hang or in gloo's own connect error, depending on timing
        assert res.verdict in ("hang", "error"), res.diagnosis.summary
    assert res.diagnosis.culprit_ranks == culprits, res.diagnosis.summary
    assert res.diagnosis.summary.endswith("."), res.diagnosis.summary


def test_collective_mismatch_names_both_sides(clean):
    res = launch(scenarios.op_mismatch, world_size=3, timeout=30)
    d = res.diagnosis
    assert (d.op, d.group, d.seq) == ("all_gather", [0, 1, 2], 1)
    assert "all_reduce" in d.summary and "all_gather" in d.summary
    assert d.site.endswith("scenarios.py:" + str(_line_of(scenarios.op_mismatch, "dist.all_gather")))
    by_rank = {r.rank: r for r in res.ranks}
    assert [r.outcome for r in res.ranks] == ["hung"] * 3
    assert by_rank[1].pending["op"] == "all_gather" and by_rank[0].pending["op"] == "all_reduce"
    # each hung rank's Python stack was fetched while it sat inside gloo
    assert all("op_mismatch" in (r.stack or "") for r in res.ranks)


def test_shape_mismatch_is_a_collective_mismatch(clean):
    res = launch(scenarios.shape_mismatch, world_size=3, timeout=30)
    assert res.verdict in ("hang", "crash")  # gloo hangs or aborts (SIGABRT) depending on the sizes
    assert res.diagnosis.kind == "collective_mismatch"
    assert res.diagnosis.culprit_ranks == [2]
    assert "shape" in res.diagnosis.details["differs_in"]


def test_init_mismatch(clean):
    port = _free_port()  # a free stand-in for the hard-coded 29500
    res = launch(scenarios.init_mismatch, world_size=3, args=(port,), timeout=30)
    assert res.verdict == "hang"
    d = res.diagnosis
    assert d.kind == "init_mismatch", d.summary
    assert d.culprit_ranks == [0]
    assert f"127.0.0.1:{port}" in d.summary


def test_straggler_only_at_timeout(clean):
    res = launch(scenarios.straggler, world_size=3, args=(60,), timeout=4)
    assert res.verdict == "timeout"
    assert res.diagnosis.kind == "straggler"
    assert res.diagnosis.culprit_ranks == [1]
    assert "time.sleep" not in res.diagnosis.summary and "scenarios.py" in res.diagnosis.summary
    assert res.wall_s >= 4  # never called a hang before the timeout: rank 1 was busy, not blocked


def test_ok_is_none_and_matches_reference(clean):
    res = launch(scenarios.ok_sum, world_size=4, kwargs={"n": 5}, timeout=30)
    assert res.verdict == "ok" and res.diagnosis.kind == "none"
    assert res.values == [[10.0] * 5] * 4  # 1 + 2 + 3 + 4


def _line_of(fn, text):
    import inspect
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)
