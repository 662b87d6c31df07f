"""What a call's arguments mean to torch (`sandbox.contracts.arguments`), on real gloo runs of programs written after
the rules by authors who had not read them (`benchmarks/corpus_after/`, each re-authored from a real bug report,
its ground truth from plain torchrun in GROUND_TRUTH_B.md): a group passed by a rank that is not its member, a
global rank where the group has no such member, a rank within the group that names another process than the
author meant, and a recv without `src`. Each names the ranks that made the call and the line; each twin is quiet."""
import os

import pytest

from conftest import ROOT
from sandbox import run_script

CORPUS = os.path.join(ROOT, "benchmarks", "corpus_after")

CASES = {
    # case: (world, contract kind, culprits, line, words the note must hold)
    "groups_nonmember_last_group": (4, "group_member", [0, 1], 29,
                                    ["with a group it is not a member of", "new_group returned it to rank 0 for group "
                                     "[2, 3]", "moves no data"]),
    "groups_reduce_dst_global": (4, "group_rank", [2, 3], 28,
                                 ["passed dst=0 to reduce", "torch reads dst as a global rank, and global rank 0 is "
                                  "not in that group", "the group's rank 0 is global rank 2 (group_dst=0)"]),
    "objects_bcast_group_src_global": (4, "group_rank", [1, 3], 29,
                                       ["passed group_src=1 to broadcast_object_list", "group_src=1 named global rank 3",
                                        "not global rank 1 (that group's rank 0)", "`leader` is a global rank"]),
    "groups_p2p_dst_group_rank": (4, "group_rank", [0, 1, 3], 44,
                                  ["Rank 1 passed dst=1 to send", "which is the calling rank itself",
                                   "the group's rank 1 is global rank 3 (group_dst=1)", "Rank 3 passed src=0 to recv"]),
    "p2p_recv_anysource_wrong_sender": (3, "any_source", [0], 32,
                                        ["names no src, so it takes the first message from any rank",
                                         "rank 2 sent to rank 0", "shape [5]", "a buffer of shape [3]"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_argument_is_named_with_the_ranks_that_passed_it(clean, case):
    world, kind, culprits, line, words = CASES[case]
    res = run_script(os.path.join(CORPUS, f"{case}.py"), world_size=world)
    d = res.diagnosis
    assert not res.ok and d.details.get("contract") == kind, (res.verdict, d.kind, d.details, d.summary)
    assert d.culprit_ranks == culprits, d.summary
    assert f"{case}.py:{line}" in d.summary, d.summary
    for w in words:
        assert w in d.summary, (w, d.summary)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_twin_is_quiet(clean, case):
    world = CASES[case][0]
    res = run_script(os.path.join(CORPUS, f"{case}.fixed.py"), world_size=world)
    assert res.ok and not res.warnings, (res.verdict, res.diagnosis.summary, [w.summary for w in res.warnings])


@pytest.mark.parametrize("case, world, senders", [
    ("p2p_recv_anysource_slots", 3, {0: [2, 1]}),
    ("p2p_irecv_anysource_halo", 4, {0: [1, 3], 1: [0, 2], 2: [1, 3], 3: [0, 2]})])
def test_receives_without_src_that_took_several_senders_are_a_warning(clean, case, world, senders):
    """The runs finish (each prints WRONG: the slots are swapped): each receiving rank is warned, with whom each of
    its receives took its message from, in the order they arrived; the twins, which name src, are quiet."""
    res = run_script(os.path.join(CORPUS, f"{case}.py"), world_size=world)
    assert res.ok, res.diagnosis.summary
    got = {w.ranks[0]: w for w in res.warnings if w.kind == "any_source"}
    assert sorted(got) == sorted(senders), [w.summary for w in res.warnings]
    for r, w in got.items():
        assert sorted(w.details["from"]) == sorted(senders[r]), w.summary
        assert f"Rank {r}'s receives without src took their messages from" in w.summary, w.summary
    assert not [w for w in res.warnings if w.kind == "p2p_unmatched"]  # a receive from any rank matched its send
    twin = run_script(os.path.join(CORPUS, f"{case}.fixed.py"), world_size=world)
    assert twin.ok and not twin.warnings, [w.summary for w in twin.warnings]


def test_a_non_member_call_is_a_warning_even_where_the_run_passes(clean, tmp_path):
    """The call moves no data whatever happens next (torch warns too): a run whose ranks never look at the value
    still ends with the warning, naming the rank and the line."""
    script = tmp_path / "quiet_nonmember.py"
    script.write_text("import torch\nimport torch.distributed as dist\n\ndist.init_process_group('gloo')\n"
                      "g = dist.new_group([0, 1])\nt = torch.ones(2)\ndist.all_reduce(t, group=g)\n"
                      "dist.destroy_process_group()\n")
    res = run_script(str(script), world_size=3)
    assert res.ok, res.diagnosis.summary
    [w] = [w for w in res.warnings if w.kind == "group_member"]
    assert (w.ranks, w.op) == ([2], "all_reduce") and w.sites[2].endswith("quiet_nonmember.py:7"), w.summary
    assert "new_group returned it to rank 2 for group [0, 1]" in w.summary, w.summary


def test_a_recv_whose_code_keeps_the_sender_it_returns_is_not_warned_of(tmp_path):
    """`src = dist.recv(t)` knows whose message it got, whatever the order of arrival; `dist.recv(t)` on its own
    line does not (sandbox.contracts.arguments.sender_read, read from the source)."""
    from sandbox.contracts.arguments import sender_read

    f = tmp_path / "recvs.py"
    f.write_text("import torch.distributed as dist\n"
                 "dist.recv(t)\n"                      # 2: dropped
                 "src = dist.recv(t)\n"                # 3: kept
                 "got[dist.recv(t, tag=1)] = t.item()\n"  # 4: kept, as an index
                 "x = dist.recv(\n    t)\n"            # 5-6: kept, over two lines
                 "print(dist.recv(t))\n"               # 7: kept, as an argument
                 "w = dist.irecv(t)\n")                # 8: an irecv: its Work, not a rank
    kept = {n: sender_read(f"{f}:{n}") for n in range(2, 9)}
    assert kept == {2: False, 3: True, 4: True, 5: True, 6: True, 7: True, 8: False}
    assert sender_read(f"{tmp_path}/missing.py:3") is False and sender_read(None) is False
