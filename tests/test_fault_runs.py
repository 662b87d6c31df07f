"""Faults injected into a run on simulated nodes (`launch(..., nnodes=2, faults=[...])`, `--kill-node`,
`--link-down`): a killed node is the diagnosis of the run it ended, a link down for a while is survived and stated,
and the timeline draws both. Needs root; skipped with the reason elsewhere."""
import re

import pytest

from sandbox import faults, launch, nodes
from sandbox.launcher import UsageError

OK, WHY = nodes.available()
pytestmark = pytest.mark.skipif(not OK, reason=WHY)


def steps(n, pause):
    """n all_reduces across both nodes, a pause after each; returns the sum of them all."""
    import time

    import torch
    import torch.distributed as dist

    total = 0.0
    for _ in range(n):
        t = torch.ones(1)
        dist.all_reduce(t)
        total += t.item()
        time.sleep(pause)
    return total


def test_a_node_killed_mid_run_is_the_diagnosis(clean):
    res = launch(steps, world_size=4, args=(50, 0.05), init=True, nnodes=2,
                 faults=[faults.parse("kill", "1@rank2:6")])
    d = res.diagnosis
    assert res.verdict in ("crash", "error") and (d.kind, d.culprit_ranks, d.details["node"]) == \
        ("node_failure", [2, 3], "node1"), d.summary
    # call 6, or the next if rank 2 got past it before the sandbox's next look at the traces
    assert re.match(r"Node1 died: killed when rank 2 \(node1\) entered its call [67], taking ranks 2 and 3 "
                    r"\(node1\) with it, and the job could not go on without them; ranks 0 and 1 \(node0\) "
                    r"then failed or were ended, a consequence\.", d.summary), d.summary
    assert [r.outcome for r in res.ranks[2:]] == ["crashed", "crashed"]
    drawn = [e for e in res.events if e.get("ev") == "fault"]
    assert [(e["kind"], e["node"], e["label"]) for e in drawn] == [("kill", 1, "node1 killed")]


def test_a_link_down_for_a_while_is_survived_and_stated(clean):
    res = launch(steps, world_size=4, args=(30, 0.05), init=True, nnodes=2, faults=[faults.parse("link-down",
                                                                                                "1@rank0:5+1s")])
    assert res.ok, res.diagnosis.summary
    assert res.values == [120.0] * 4  # every all_reduce summed all four ranks, the stalled one included
    assert re.search(r"Node1's link went down when rank 0 \(node0\) entered its call [56] for 1 s\.",
                     res.diagnosis.summary), res.diagnosis.summary
    (e,) = [e for e in res.events if e.get("ev") == "fault"]
    assert e["label"] == "node1 link down" and e["until"] - e["t"] == pytest.approx(1.0, abs=0.01)
    # the link was down for real: every rank's longest all_reduce waited about the second it was down, none before
    for r in range(4):
        entered = {x["id"]: x["t"] for x in res.events if x.get("rank") == r and x.get("ev") == "enter"}
        waits = {x["id"]: x["t"] - entered[x["id"]] for x in res.events
                 if x.get("rank") == r and x.get("ev") == "exit" and x["id"] in entered}
        longest = max(waits, key=waits.get)
        assert 0.7 < waits[longest] < 5 and longest >= 5, (r, waits)


def test_the_timeline_draws_the_fault(clean, tmp_path):
    from sandbox.report import picture

    res = launch(steps, world_size=4, args=(20, 0.02), init=True, nnodes=2,
                 faults=[faults.parse("kill", "0@rank3:4")])
    fig = picture.draw(res)
    ax = fig.axes[0]
    assert "node0 killed" in [t.get_text() for t in ax.texts]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0 (node0)", "rank 1 (node0)", "rank 2 (node1)",
                                                            "rank 3 (node1)"]


@pytest.mark.parametrize("kw, says", [
    ({"world_size": 2, "faults": [faults.Fault(kind="kill", node=1, at_s=1.0)]}, "give nnodes=2 or more"),
    ({"world_size": 4, "nnodes": 2, "faults": [faults.Fault(kind="kill", node=2, at_s=1.0)]},
     "--kill-node names node 2, and this run has nodes 0-1, ranks 0-3."),
    ({"world_size": 4, "nnodes": 2, "faults": [faults.Fault(kind="kill", node=1, at_call=(4, 2))]},
     "names node 1 and rank 4"),
    ({"world_size": 4, "nnodes": 2, "faults": [faults.Fault(kind="Kill", node=1, at_s=1.0)]},
     "with kind one of kill, link-down"),
    ({"world_size": 4, "nnodes": 2, "faults": [faults.Fault(kind="kill", node=1)]}, "one of them"),
    ({"world_size": 4, "nnodes": 2, "faults": [faults.Fault(kind="link-down", node=1, at_s=0.0)]},
     "lasts for_s=SECONDS"),
    ({"world_size": 4, "nnodes": 2, "faults": [faults.Fault(kind="kill", node=1, at_s=1.0, for_s=2.0)]},
     "only a link-down has a duration"),
])
def test_faults_the_run_cannot_have_are_one_sentence(kw, says):
    with pytest.raises(UsageError, match=says.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        launch(steps, args=(1, 0), init=True, **kw)
