"""Lab 00's graded cells, on real gloo ranks: its predictions and its exercises' checks tell a right answer from a
plausible wrong one.

The functions are the lab's own, read from labs/00_primitives.ipynb (every `def` of its code cells, and the
assignments of the exercise cells, such as the rules), so the test holds the notebook itself, not a copy:

- `lab.predict_values` on the lab's reduce and all_to_all accepts the right prediction and rejects the guesses
  people make: that a non-root rank keeps its tensor after `reduce`, that all_to_all sums like reduce_scatter or
  hands back rows;
- exercise 1 (all_reduce from reduce_scatter + all_gather): the answer passes; the starting function, a plain
  all_reduce and a sum computed locally (no communication) do not;
- exercise 2 (a ring with blocking calls): the answer (by parity) passes; the starting function hangs as a
  p2p cycle; the isend/irecv ring breaks the exercise's rule;
- exercise 3 (make it hang without naming a rank): the answer (a branch on the rank's own loss) is the collective
  mismatch asked for; the starting function (a branch on the summed loss) finishes and is turned down.
"""
import ast
import os

import pytest
from conftest import ROOT

from sandbox import compat, lab

nbformat = pytest.importorskip("nbformat", reason="needs the optional package nbformat (pip install -e '.[dev]')")

pytestmark = pytest.mark.usefixtures("clean")

LAB = os.path.join(ROOT, "labs", "00_primitives.ipynb")
RUNS = ("lab.check", "lab.predict_values")  # the calls that run something: left out when the cells are read


def _runs(node) -> bool:
    return any(isinstance(n, ast.Call) and ast.unparse(n.func) in RUNS for n in ast.walk(node))


@pytest.fixture(scope="module")
def ns():
    """The lab's functions and the exercises' rules and references, defined as the notebook defines them. No
    `__name__` in the namespace: the functions belong to no module, so the sandbox sends them to the ranks by value,
    as it does a notebook's."""
    import shutil
    import tempfile

    import torch
    import torch.distributed as dist

    space = {"os": os, "shutil": shutil, "tempfile": tempfile, "torch": torch, "dist": dist, "lab": lab,
             "compat": compat}
    nb = nbformat.read(LAB, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.source.lstrip().startswith("%"):
            continue
        tree = ast.parse(cell.source)
        if not any(isinstance(n, ast.FunctionDef) for n in tree.body):  # a cell that only uses what others made
            continue
        kept = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.Assign)) and not _runs(n)]
        exec(compile(ast.Module(body=kept, type_ignores=[]), "<lab 00>", "exec"), space)
    return space


# ------------------------------------------------------------------------------------------------ predictions
def test_reduce_prediction(ns):
    fn = ns["everyone_to_one"]
    root = {"reduce": [10], "gather": [[1], [2], [3], [4]]}
    right = lab.predict_values(fn, {0: root}, n=4, show=False)  # the root's result is the defined one
    assert right.ok and right.verdict == "right", right
    # the usual guess: a rank that is not the root keeps its own [r + 1]; gloo leaves partial sums there instead
    kept = [root] + [{"reduce": [r + 1], "gather": None} for r in (1, 2, 3)]
    wrong = lab.predict_values(fn, kept, n=4, show=False)
    assert not wrong.ok and wrong.verdict == "wrong", wrong
    assert "Rank 1 returned" in wrong.message and "you predicted {'reduce': [2]" in wrong.message, wrong.message


def test_all_to_all_prediction(ns):
    fn = ns["chunk_i_to_rank_i"]
    right = [{"reduce_scatter": [60 + 4 * i], "all_to_all": [i, 10 + i, 20 + i, 30 + i]} for i in range(4)]
    c = lab.predict_values(fn, right, n=4, show=False)
    assert c.ok and c.message.startswith("All 4 right"), c
    summed = [{"reduce_scatter": [60 + 4 * i], "all_to_all": [60 + 4 * i]} for i in range(4)]  # as reduce_scatter
    rows = [{"reduce_scatter": [60 + 4 * i], "all_to_all": [10 * i + j for j in range(4)]} for i in range(4)]
    for guess in (summed, rows):
        c = lab.predict_values(fn, guess, n=4, show=False)
        assert not c.ok and c.verdict == "wrong", c
    assert "0 of 4 right" in c.message, c.message  # the rows: only the diagonal chunk is where it was, on no rank


# ------------------------------------------------------------------------------------------------ exercise 1
def two_step_answer():
    """Exercise 1's answer, as the notebook's hidden answer writes it."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    row = torch.arange(4) + 10 * rank
    mine = torch.tensor([-1])
    compat.reduce_scatter_single(mine, row)
    pieces = [torch.tensor([-1]) for _ in range(4)]
    dist.all_gather(pieces, mine)
    result = torch.cat(pieces).tolist()
    dist.destroy_process_group()
    return result


def plain_all_reduce():
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    row = torch.arange(4) + 10 * dist.get_rank()
    dist.all_reduce(row)
    dist.destroy_process_group()
    return row.tolist()


def computed_locally():
    """Every rank knows the formula: the right numbers, and nothing communicated."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    result = sum(torch.arange(4) + 10 * r for r in range(dist.get_world_size())).tolist()
    dist.barrier()  # no collective above: without it a fast rank may leave while a slow one still connects
    dist.destroy_process_group()
    return result


def test_exercise_1(ns):
    ref, rules = ns["row_sum"], ns["rules"]
    c = lab.check(two_step_answer, n=4, reference=ref, rules=rules, show=False)
    assert c.ok and c.verdict == "right", c
    start = lab.check(ns["two_step_all_reduce"], n=4, reference=ref, rules=rules, show=False)
    assert not start.ok and start.verdict == "wrong", start
    shortcut = lab.check(plain_all_reduce, n=4, reference=ref, rules=rules, show=False)
    assert not shortcut.ok and shortcut.verdict == "rule", shortcut
    assert "without all_reduce" in shortcut.message and "called all_reduce" in shortcut.message, shortcut.message
    local = lab.check(computed_locally, n=4, reference=ref, rules=rules, show=False)
    assert not local.ok and local.verdict == "rule", local
    assert "reduce_scatter" in local.message, local.message


# ------------------------------------------------------------------------------------------------ exercise 2
def blocking_ring_by_parity():
    """Exercise 2's answer: even ranks send then receive, odd ranks receive then send."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    got = torch.tensor([-1])
    if rank % 2 == 0:
        dist.send(torch.tensor([rank + 1]), dst=(rank + 1) % world)
        dist.recv(got, src=(rank - 1) % world)
    else:
        dist.recv(got, src=(rank - 1) % world)
        dist.send(torch.tensor([rank + 1]), dst=(rank + 1) % world)
    dist.destroy_process_group()
    return got.tolist()


def test_exercise_2(ns):
    ref = ns["left_neighbour"]
    rules = [lab.Rule(says="use blocking send and recv only", found=ns["no_async"])]
    c = lab.check(blocking_ring_by_parity, n=4, reference=ref, rules=rules, show=False)
    assert c.ok and c.verdict == "right", c
    start = lab.check(ns["blocking_ring"], n=4, reference=ref, rules=rules, show=False)
    assert not start.ok and start.verdict == "hang", start
    assert start.result.diagnosis.kind == "p2p_cycle", start.result.diagnosis
    # section 5's ring: the right values, but not what the exercise asks for
    posted = lab.check(isend_ring, n=4, reference=ref, rules=rules, show=False)
    assert not posted.ok and posted.verdict == "rule", posted
    assert "isend" in posted.message, posted.message


def isend_ring():
    """Section 5's ring: post the isend and the irecv, then wait on both."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    got = torch.tensor([-1])
    works = [dist.isend(torch.tensor([rank + 1]), dst=(rank + 1) % world), dist.irecv(got, src=(rank - 1) % world)]
    for work in works:
        work.wait()
    dist.destroy_process_group()
    return got.tolist()


# ------------------------------------------------------------------------------------------------ exercise 3
def hang_on_own_loss():
    """Exercise 3's answer: the barrier behind the rank's own loss, not the summed one."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(2):
        mine = torch.tensor([rank + 1.0])
        total = mine.clone()
        dist.all_reduce(total)
        if mine.item() > 2:
            dist.barrier()
    dist.destroy_process_group()


def test_exercise_3(ns):
    c = lab.check(hang_on_own_loss, n=4, expect="hang", kind="collective_mismatch", show=False)
    assert c.ok and c.verdict == "hang", c
    assert "barrier" in c.result.diagnosis.summary, c.result.diagnosis.summary
    start = lab.check(ns["save_when_the_loss_is_high"], n=4, expect="hang", kind="collective_mismatch", show=False)
    assert not start.ok and start.verdict == "right", start  # it finishes: the branch is on the summed loss
