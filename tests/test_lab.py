"""`sandbox.lab`, the API the bug labs call: a learner's fix of gather-uneven is run on the bug's 4 ranks and judged
by the fixed variant's expectation. A fix that hangs, one that returns a wrong value and one that raises are
rejected, each with the sentence a learner needs; the right one is accepted; a fix typed into a notebook cell
travels by value; an unknown bug is one clear error."""
from __future__ import annotations

import os
import threading

import pytest
import scenarios_lab
from conftest import NOTEBOOK_PACKAGES, ROOT, execute_notebook, leftovers, need

from sandbox import lab


@pytest.fixture(scope="module")
def b():
    return lab.Lab("gather-uneven")


def test_an_unknown_bug_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown bug 'nope'; the catalogue has: .*gather-uneven.*kv-sync"):
        lab.Lab("nope")


def test_source_is_the_module_s_own_code(b):
    assert b.source("broken").startswith("def broken():")
    assert "# FIX" in b.source("fixed")
    with pytest.raises(ValueError, match="defines no function 'nope'"):
        b.source("nope")
    with pytest.raises(ValueError, match="'broken' or 'fixed'"):
        b.run("sideways")


def test_the_right_fix_is_accepted(b, clean):
    c = b.check(scenarios_lab.right, show=False)
    assert (c.ok, c.verdict) == (True, "right"), c
    assert c.message == "Every rank finished and matches the single-process reference (4 ranks)."
    assert c.result.verdict == "ok" and c.result.world_size == 4
    assert c.result.warnings == [], [w.summary for w in c.result.warnings]
    assert "\u2714 Right" in c._repr_html_()


def test_a_fix_that_hangs_is_rejected_and_says_where(b, clean):
    c = b.check(scenarios_lab.hangs, show=False)
    assert (c.ok, c.verdict) == (False, "hang"), c
    assert c.result.diagnosis.kind == "p2p_cycle"
    assert c.message.startswith("It hangs. Point-to-point cycle: rank 0 blocks in recv from rank 3 at ")
    assert "scenarios_lab.py:" in c.message


def test_a_fix_with_a_wrong_value_names_the_rank_and_both_values(b, clean):
    c = b.check(scenarios_lab.wrong_value, show=False)
    assert (c.ok, c.verdict) == (False, "wrong"), c
    assert c.result.verdict == "ok"  # it ran to the end: only the answer is wrong
    assert c.message == ("Rank 0 returned a wrong value: [0] is [0.0, 1.0, 0.0, 0.0, 0.0], the single-process"
                         " reference has [0.0, 1.0] (ranks 0-3 differ).")
    html = c._repr_html_()
    assert "\u2718 Wrong answer" in html and "<details open" in html


def test_a_fix_that_raises_names_the_rank_and_the_error(b, clean):
    c = b.check(scenarios_lab.raises, show=False)
    assert (c.ok, c.verdict) == (False, "error"), c
    assert c.result.diagnosis.culprit_ranks == [1]
    assert c.message.startswith("It fails. Rank 1 raised ValueError: rank 1 has no sizes to share"), c.message


def test_a_fix_the_ranks_cannot_receive_is_an_answer_not_an_exception(b, clean):
    lock = threading.Lock()
    c = b.check(lambda: lock, show=False)
    assert (c.ok, c.verdict, c.result) == (False, "error", None)
    assert "cannot be sent to the ranks" in c.message


def test_run_shows_the_result_outside_jupyter(b, capsys, clean):
    res = b.run("broken", show=True)
    assert res.verdict in ("hang", "crash") and res.diagnosis.kind == "collective_mismatch"
    assert capsys.readouterr().out.startswith(res.headline())


FIX_IN_A_CELL = '''\
import datetime
import torch
import torch.distributed as dist
from sandbox.bugs.gather_uneven import items

def my_fix():  # sizes agreed, then padded to the longest: but never cut back
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = items(rank)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([len(mine)]))
    padded = torch.zeros(int(max(sizes)))
    padded[:len(mine)] = mine
    out = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(out, padded)
    return [t.tolist() for t in out]
'''


def test_a_fix_typed_into_a_notebook_cell(tmp_path):
    """The learner's function lives only in the kernel: it reaches the ranks by value; the check is shown as HTML."""
    need(*NOTEBOOK_PACKAGES)
    import nbformat

    cells = [FIX_IN_A_CELL, "from sandbox import lab\nc = lab.Lab('gather-uneven').check(my_fix)",
             "print(c.verdict, c.ok)"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    env.pop("SANDBOX_WARM", None)
    execute_notebook(nb, str(tmp_path), timeout=120, env=env)
    html = "".join(o["data"].get("text/html", "") for o in nb.cells[1].outputs if o["output_type"] == "display_data")
    assert "\u2718 Wrong answer" in html and "Rank 0 returned a wrong value" in html, nb.cells[1].outputs
    assert "".join(o.get("text", "") for o in nb.cells[2].outputs).strip() == "wrong False"
    assert leftovers() == []
