"""Contract warnings (sandbox.contracts): real runs over gloo that finish yet break a contract get a warning naming
the ranks, the call and its site; correct runs get none (the catalogue's fixed variants are checked in
test_catalogue.py, the labs' reference fixes in test_lab.py and test_labs.py)."""
import json
import os

import pytest

import scenarios_contracts as sc
from conftest import ROOT, run_cli
from sandbox import launch
from sandbox.diagnose.__main__ import load_result

EX = os.path.join(ROOT, "examples")


def _kinds(res):
    return [w.kind for w in res.warnings]


def test_a_collective_that_completed_differently_on_the_ranks(clean):
    res = launch(sc.reduce_ops_differ, world_size=2)
    assert res.verdict == "ok", res.diagnosis.summary
    [w] = res.warnings
    assert (w.kind, w.op, w.group, w.seq, w.ranks) == ("collective_differs", "all_reduce", [0, 1], 1, [0, 1])
    assert "rank 0 called all_reduce(shape [1], float32, SUM)" in w.summary
    assert "rank 1 called all_reduce(shape [1], float32, MAX)" in w.summary
    assert w.sites == {0: "tests/scenarios_contracts.py:19", 1: "tests/scenarios_contracts.py:19"}
    assert w.summary.endswith("2 later calls of this group differed too.")


def test_a_group_created_by_only_some_ranks(clean):
    res = launch(sc.group_by_some_ranks, world_size=4)
    assert res.verdict == "ok", res.diagnosis.summary
    [w] = res.warnings
    assert (w.kind, w.op, w.seq) == ("group_mismatch", "new_group", 1)
    assert w.summary.startswith("Only ranks 0 and 1 created group [0, 1]") and "ranks 2 and 3 never did" in w.summary


def test_a_send_never_received_and_never_waited(clean):
    res = launch(sc.isend_never_received, world_size=2)
    assert res.verdict == "ok", res.diagnosis.summary
    assert _kinds(res) == ["p2p_unmatched", "async_unwaited"]
    p2p, unwaited = res.warnings
    assert "Rank 0 sent 1 message to rank 1" in p2p.summary and "1 never received" in p2p.summary
    assert unwaited.ranks == [0] and unwaited.op == "isend" and "never waited on" in unwaited.summary


def test_ranks_that_left_with_different_call_counts(clean):
    res = launch(sc.extra_async_collective, world_size=2)
    assert res.verdict == "ok", res.diagnosis.summary
    assert _kinds(res) == ["async_unwaited", "call_count"]
    count = res.warnings[1]
    assert (count.group, count.seq) == ([0, 1], 2)
    assert "rank 0 made 2; rank 1 made 1" in count.summary
    assert "(through `if rank == 0:` at tests/scenarios_contracts.py:51)" in count.summary


def test_a_group_never_destroyed(clean):
    res = launch(sc.never_destroyed, world_size=3)
    assert res.verdict == "ok"
    [w] = res.warnings
    assert w.kind == "not_destroyed" and w.ranks == [0, 1, 2] and w.summary.startswith("Ranks 0-2 exited")


def test_no_warning_on_a_long_correct_data_parallel_loop(clean):
    res = launch(sc.data_parallel_loop, world_size=3, timeout=120)
    assert res.verdict == "ok", res.diagnosis.summary
    assert res.warnings == [], [w.summary for w in res.warnings]
    assert len(set(res.values)) == 1  # every rank ends with the same weights


@pytest.mark.parametrize("script", sorted(f for f in os.listdir(EX) if f.endswith(".py") and not f.startswith("gpu")))
def test_no_warning_on_the_examples(script, clean):
    p = run_cli("sandbox.run", "-n", "2", "--json", os.path.join(EX, script))
    assert json.loads(p.stdout)["warnings"] == [], p.stdout


def test_json_terminal_strict_and_offline_say_the_same(tmp_path, clean):
    script = tmp_path / "leave.py"
    script.write_text("import torch, torch.distributed as dist\ndist.init_process_group('gloo')\n"
                      "t = torch.ones(1)\ndist.all_reduce(t)\n")
    p = run_cli("sandbox.run", "-n", "2", "--json", "--trace-dir", str(tmp_path / "tr"), str(script))
    assert p.returncode == 0
    [w] = json.loads(p.stdout)["warnings"]
    assert set(w) >= {"kind", "summary", "ranks", "op", "group", "seq", "sites", "rule"}
    assert w["kind"] == "not_destroyed"
    p = run_cli("sandbox.run", "-n", "2", str(script))
    assert p.returncode == 0 and "Warning [not_destroyed]: Ranks 0 and 1 exited without destroying" in p.stdout
    p = run_cli("sandbox.run", "-n", "2", "--strict", str(script))
    assert p.returncode == 1 and p.stdout.startswith("FAILED (strict: 1 contract warning): 2 ranks in")
    offline = load_result(str(tmp_path / "tr"))
    assert [x.to_dict() for x in offline.warnings] == [w]


def test_a_hang_names_the_rank_dependent_if_that_led_there(clean):
    res = launch(sc.checkpoint_on_rank_zero, world_size=4)
    assert res.verdict == "hang" and res.diagnosis.kind == "collective_mismatch", res.diagnosis.summary
    assert ("Rank 0 reached barrier() at tests/scenarios_contracts.py:101 through `if step == 1 and rank == 0:` at "
            "tests/scenarios_contracts.py:111; ranks 1-3 skipped it.") in res.diagnosis.summary
    assert res.diagnosis.details["branch"] == {"test": "step == 1 and rank == 0", "taken": "if", "ranks": [0],
                                               "site": "tests/scenarios_contracts.py:111"}


def test_an_object_collective_that_handed_tensors_from_other_devices(clean):
    res = launch(sc.gathered_across_devices, world_size=3)
    assert res.verdict == "ok" and res.values == ["cuda:0", "cuda:1", "cuda:2"], res.diagnosis.summary
    [w] = res.warnings
    assert (w.kind, w.op, w.ranks) == ("object_device", "all_gather_object", [0, 1, 2])
    assert w.summary.startswith("all_gather_object at tests/scenarios_contracts.py:") and \
        "handed rank 0 tensors on cuda:1, cuda:2 (from ranks 1 and 2), while its own are on cuda:0" in w.summary


def test_a_failure_a_warning_explains_says_so_in_the_diagnosis(clean):
    from sandbox.bugs import registry
    from sandbox.bugs import run_variant

    res, ok, _ = run_variant(registry()["cross-device"], "broken", 4)
    assert ok and res.verdict == "error"
    culprit = res.diagnosis.culprit_ranks[0]
    assert (f"Rank {culprit}'s failing call at sandbox/bugs/cross_device.py:" in res.diagnosis.summary
            and "got tensors that all_gather_object at sandbox/bugs/cross_device.py:" in res.diagnosis.summary)
    assert res.diagnosis.details["contract"] == "object_device"

    # the receiver's error, and why it came: the sender, which left with its isend pending, is the one to fix
    res, ok, _ = run_variant(registry()["isend-unwaited"], "broken", 2)
    assert ok and res.verdict == "error" and res.diagnosis.culprit_ranks == [0], res.diagnosis.summary
    assert ("Rank 0's isend to rank 1 at sandbox/bugs/isend_unwaited.py:" in res.diagnosis.summary
            and "rank 0 left with it still pending, which closed the connection rank 1 was receiving on"
            in res.diagnosis.summary), res.diagnosis.summary
    assert res.diagnosis.details["contract"] == "async_unwaited"


def _track(rank, calls):
    """A rank's track fed the events of blocking point-to-point calls (op, peer, entered, finished), as NCCL writes
    them: the exit in flight, the done when the GPU finished."""
    from sandbox.events import RankTrack

    t = RankTrack(rank)
    for i, (op, peer, t0, t1) in enumerate(calls, 1):
        t.feed({"ev": "enter", "rank": rank, "id": i, "op": op, "peer": peer, "t": t0, "site": f"kv.py:{10 + i}"})
        t.feed({"ev": "exit", "rank": rank, "id": i, "op": op, "inflight": True, "t": t0 + 0.001})
        t.feed({"ev": "done", "rank": rank, "id": i, "t": t1})
    t.feed({"ev": "end", "rank": rank, "outcome": "ok", "t": 10.0})
    return t


def test_two_ranks_sending_to_each_other_first_is_a_send_cycle_even_when_it_completed():
    """The kv-sync pattern as NCCL completes it at small sizes (only a GPU run makes it finish for real: the gpu
    test of kv-sync checks that); and a pipeline, where rank 1 receives before it sends back, is not one."""
    from sandbox.contracts import breaches as check

    cycle = {0: _track(0, [("send", 1, 1.0, 1.5), ("recv", 1, 1.6, 1.7)]),
             1: _track(1, [("send", 0, 1.1, 1.5), ("recv", 0, 1.6, 1.7)])}
    [w] = [w for w in check(cycle) if w.kind == "send_cycle"]
    assert w.ranks == [0, 1] and w.sites == {0: "kv.py:11", 1: "kv.py:11"}
    pipeline = {0: _track(0, [("send", 1, 1.0, 1.4), ("recv", 1, 1.45, 1.6)]),  # its done seen late: overlap
                1: _track(1, [("recv", 0, 1.05, 1.3), ("send", 0, 1.31, 1.6)])}
    assert [w.kind for w in check(pipeline)] == []
    # kv-sync's fix on 3 GPUs: each layer's owner sends, the others receive. NCCL returns every call to the host at
    # once and finishes them on the GPU later, so the calls overlap in time; by the order they were posted, every
    # recv comes before the send back. (The first version judged by time and warned here on 4 H200s.)
    owner_sends = {0: [("send", 1), ("send", 2), ("recv", 1), ("recv", 2)],
                   1: [("recv", 0), ("send", 0), ("send", 2), ("recv", 2)],
                   2: [("recv", 0), ("recv", 1), ("send", 0), ("send", 1)]}
    fixed = {r: _track(r, [(op, peer, 1.0 + 0.01 * i, 2.0 + 0.01 * i) for i, (op, peer) in enumerate(calls)])
             for r, calls in owner_sends.items()}
    assert [w.kind for w in check(fixed)] == []
    broken = {r: _track(r, [(op, peer, 1.0 + 0.01 * i, 2.0 + 0.01 * i) for i, (op, peer) in enumerate(calls)])
              for r, calls in {0: [("send", 1), ("send", 2), ("recv", 1), ("recv", 2)],
                               1: [("send", 0), ("send", 2), ("recv", 0), ("recv", 2)],
                               2: [("send", 0), ("send", 1), ("recv", 0), ("recv", 1)]}.items()}
    assert sorted(w.ranks for w in check(broken) if w.kind == "send_cycle") == [[0, 1], [0, 2], [1, 2]]


def test_ddp_parameters_or_buffers_in_another_order_are_named():
    """DDP copies rank 0's parameters and buffers by position: the same names in another order on a rank is a silent
    swap (named); other names are DDP's own error, not this warning; buffers not broadcast cannot be swapped."""
    from sandbox.contracts import breaches
    from sandbox.events import RankTrack

    def built(order, broadcast=True):
        tracks = {}
        for r, names in enumerate(order):
            t = tracks[r] = RankTrack(r)
            t.feed({"ev": "hello", "rank": r, "world_size": len(order), "t": 0.0})
            t.feed({"ev": "ddp", "rank": r, "t": 1.0, "site": "job.py:9", "params": [["w", [4]]],
                    "buffers": [[n, [2]] for n in names], "broadcast_buffers": broadcast})
        return [w for w in breaches(tracks) if w.kind == "ddp_order"]

    [w] = built([["a", "b"], ["b", "a"], ["a", "b"]])
    assert w.ranks == [1] and "at position 1, rank 0 has `a` and rank 1 `b`" in w.summary, w.summary
    assert built([["a", "b"], ["a", "b"]]) == []
    assert built([["a", "b"], ["a", "c"]]) == []
    assert built([["a", "b"], ["b", "a"]], broadcast=False) == []
