"""The lab API of issue 19 (`sandbox.lab`): code shown without its answers, graded predictions, generic checks
(right, and "make it hang"), contracts that make a finished run not right unless lenient, a lab's rules and the
notes they read, value predictions, and warnings shown once per kind and site with a count.

Every run is a real gloo run of 2-4 ranks; each function is shown accepting a right answer and rejecting a wrong
one. The functions the ranks run are this module's own (the ranks import it by name, as they would a notebook's
helpers module)."""
from __future__ import annotations

import pickle
import re
import types
from html import unescape
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from conftest import ROOT, run_in_kernel

from sandbox import bugs, lab
from sandbox.result import Diagnosis, RankResult, RunResult


def plain(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", " ", html)).strip()


# ----------------------------------------------------------------------------------------------- what the ranks run
def summed():
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    return t.tolist()


def maxed():  # a plausible wrong answer: the largest, not the sum
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def summed_reference(n):
    return [float(sum(range(1, n + 1)))]


def ring_of_sends():
    """Every rank sends to its right neighbour first: a cycle. It notes a fact first: notes must not hide a hang."""
    rank, world = dist.get_rank(), dist.get_world_size()
    lab.note(step="before the ring")
    t = torch.zeros(1)
    dist.send(t, dst=(rank + 1) % world)
    dist.recv(t, src=(rank - 1) % world)


def reads_blocks():
    """Notes the blocks it reads: its own, and (rank 1) block 0 too; a tensor is kept as its numbers."""
    rank = dist.get_rank()
    lab.note(read_block=rank, row=torch.tensor([rank, 7]))
    if rank == 1:
        lab.note(read_block=0)
    t = torch.ones(1)
    dist.all_reduce(t)
    return rank


def alone():  # the no-communication shortcut: right values, no call that moves data
    return dist.get_rank()


def sets_up_its_own_group():
    import datetime

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    dist.barrier()  # no collective above: without it a fast rank may leave while a slow one still connects
    dist.destroy_process_group()
    return rank


def isends_never_waited(count=24):
    """Rank 0 isends `count` tensors from one line and never waits on them; rank 1 receives them all."""
    t = torch.ones(4)
    for _ in range(count):
        if dist.get_rank() == 0:
            dist.isend(t, dst=1)
        else:
            dist.recv(torch.empty(4), src=0)
    dist.barrier()  # rank 0 stays until rank 1 has them all: the sends are done, only never waited on
    return dist.get_rank()


def kv_sync_isend_unwaited():
    """Lab 04's shortcut: every rank isends its layers' cache to every peer, then receives; the isends are never
    waited on. The values are right (gloo buffered the sends), the contract is not kept."""
    from sandbox.bugs.kv_sync import PROMPT, decode, prefill
    from sandbox.bugs.kv_sync import _buffers as buffers
    from sandbox.bugs.kv_sync import _setup as setup

    model, rank, world, own, mine = setup()
    cache, first = prefill(model, rank, world, mine)
    for p in (p for p in range(world) if p != rank):
        for layer in mine:
            dist.isend(cache[layer][0], dst=p)
            dist.isend(cache[layer][1], dst=p)
    for p in (p for p in range(world) if p != rank):
        for layer in [la for la, o in own.items() if o == p]:
            k, v = buffers(model, len(PROMPT))
            dist.recv(k, src=p)
            dist.recv(v, src=p)
            cache[layer] = (k, v)
    tokens = decode(model, cache, first)
    dist.barrier()  # no rank leaves while a peer still receives its sends: they are done, only never waited on
    dist.destroy_process_group()
    return {"pairwise": tokens, "ring": tokens}


# ----------------------------------------------------------------------------------------------- show without hints
HINTED = re.compile(r"#\s*(BUG|FIX)\b")


@pytest.mark.parametrize("slug", sorted(bugs.registry()))
def test_show_strips_every_hint_of_every_broken_variant(slug, capsys):
    b = lab.Lab(slug)
    for name in ("broken", "fixed"):
        stripped = b.source(name, hints=False)
        assert not HINTED.search(stripped), stripped
        assert b.source(name, hints=True) == b.source(name)  # as written
        code = [line for line in b.source(name).splitlines() if line.strip() and not line.strip().startswith("#")]
        assert len([line for line in stripped.splitlines() if line.strip()]) >= len(code)  # no code line lost
    b.show("broken")
    assert not HINTED.search(capsys.readouterr().out)
    b.show("broken", hints=True)
    assert capsys.readouterr().out == b.source("broken")


def test_the_hints_go_and_nothing_else_does():
    src = ('def f():\n'
           '    x = 1  # BUG: one\n'
           '    # FIX (sender): a whole line,\n'
           '    # continued on the next one at its column\n'
           '    y = 2\n'
           '    # an ordinary comment stays\n'
           '    s = "# BUG in a string stays"  # why: stays\n'
           '    return x  # FIX: cut\n')
    assert lab.strip_hints(src) == ('def f():\n    x = 1\n    y = 2\n    # an ordinary comment stays\n'
                                    '    s = "# BUG in a string stays"  # why: stays\n    return x\n')
    assert "# BUG" in lab.Lab("kv-sync").source("sync_all_at_once")
    assert "# BUG" not in lab.Lab("kv-sync").source("sync_all_at_once", hints=False)


# ----------------------------------------------------------------------------------------------- generic checks
def test_check_accepts_the_right_value_and_names_a_wrong_one(clean):
    c = lab.check(summed, n=3, reference=summed_reference, show=False)
    assert (c.ok, c.verdict) == (True, "right"), c
    assert c.message == "Every rank finished and matches the single-process reference (3 ranks)."
    c = lab.check(maxed, n=3, reference=summed_reference, show=False)
    assert (c.ok, c.verdict) == (False, "wrong"), c
    assert c.message == ("Rank 0 returned a wrong value: [0] is 3.0, the single-process reference has 6.0"
                         " (ranks 0-2 differ).")
    assert "\u2718 Wrong answer" in c._repr_html_()


def test_check_with_a_per_rank_reference_and_a_function_that_makes_its_own_group(clean):
    c = lab.check(sets_up_its_own_group, n=2, reference=lambda n: {"per_rank": list(range(n))}, show=False)
    assert (c.ok, c.verdict) == (True, "right"), c
    c = lab.check(sets_up_its_own_group, n=2, reference=lambda n: {"per_rank": [1, 0]}, show=False)
    assert (c.ok, c.verdict) == (False, "wrong") and c.message.startswith("Rank 0 returned 0,"), c


def test_check_an_exercise_that_asks_for_a_hang(clean):
    c = lab.check(ring_of_sends, n=3, expect="hang", kind="p2p_cycle", culprits=[0, 1, 2], show=False)
    assert (c.ok, c.verdict) == (True, "hang"), c
    assert c.message.startswith("It shows a hang (p2p_cycle), as asked. Point-to-point cycle:"), c.message
    assert lab.notes(c.result) == {r: [{"step": "before the ring"}] for r in range(3)}  # notes kept; hang named
    c = lab.check(ring_of_sends, n=3, expect="hang", kind="collective_mismatch", show=False)
    assert (c.ok, c.verdict) == (False, "hang"), c
    assert c.message.startswith("It shows a hang, but the sandbox names it p2p_cycle, not collective_mismatch.")
    c = lab.check(summed, n=2, expect="hang", show=False)
    assert (c.ok, c.verdict, c.title) == (False, "right", "Finished"), c
    assert c.message.startswith("You asked for a hang, but it finished:")


def raises_on_rank_1():
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise RuntimeError("rank 1 gives up")


def test_check_tells_an_error_from_a_crash_where_the_learner_said_the_other(clean):
    """Asked for a crash, a rank raised: the answer says what each word means (the learner may not know yet)."""
    c = lab.check(raises_on_rank_1, n=2, expect="crash", show=False)
    assert (c.ok, c.verdict) == (False, "error"), c
    assert c.message.startswith("You asked for a crash, but it fails:"), c.message
    assert c.message.endswith("(Crash means a rank was killed by a signal (gloo aborts the process on some mismatches);"
                              " error means a rank raised an exception (or exited non-zero).)"), c.message
    c = lab.check(raises_on_rank_1, n=2, expect="hang", show=False)
    assert "Crash means" not in c.message, c.message


def test_check_refuses_what_it_cannot_judge():
    with pytest.raises(ValueError, match=r"^expect is one of right, hang, error, crash, wrong, not 'stuck'\.$"):
        lab.check(summed, expect="stuck")
    with pytest.raises(ValueError, match="needs a reference"):
        lab.check(summed, expect="wrong")


# ----------------------------------------------------------------------------------------------- contracts
def test_an_unwaited_isend_is_not_right_unless_lenient(clean):
    """Lab 04's unwaited isend: the values match the reference, the contract is broken."""
    b = lab.Lab("kv-sync")
    c = b.check(kv_sync_isend_unwaited, show=False)
    assert (c.ok, c.verdict) == (False, "contract"), c
    assert c.message.startswith("Every rank finished and matches the single-process reference, but it broke a"
                                " contract: Rank 0's isend to rank 1 at "), c.message
    assert "The contract (async_unwaited): The Work of an isend" in c.message
    assert c.message.endswith("Pass lenient=True to accept it anyway.")
    assert "\u2718 Breaks a contract" in c._repr_html_()
    c = b.check(kv_sync_isend_unwaited, lenient=True, show=False)
    assert (c.ok, c.verdict) == (True, "right"), c
    assert "accepted as you asked (lenient=True)" in c.message and "async_unwaited" in c.message
    c = b.check(b.module.fixed, show=False)  # the reference fix still passes
    assert (c.ok, c.verdict) == (True, "right") and c.result.warnings == [], c


def test_warnings_of_one_kind_and_site_are_shown_once_with_a_count(clean):
    c = lab.check(isends_never_waited, n=2, show=False)
    assert c.verdict == "contract", c
    res = c.result
    assert len(res.warnings) == 24 and {w.kind for w in res.warnings} == {"async_unwaited"}  # the data: complete
    text = res.text()
    assert text.count("Warning [async_unwaited]") == 1, text
    assert re.search(r"Warning \[async_unwaited\] at tests/test_lab_api\.py:\d+ \(x24\): Rank 0's isend to rank 1"
                     r" at tests/test_lab_api\.py:\d+ was never waited on: .* \(23 more like it, on rank 0\)\.",
                     text), text
    for shown in (plain(res._repr_html_()), plain(c._repr_html_())):
        assert shown.count("Warning [async_unwaited]") == 1 and "(x24)" in shown, shown
    assert "(23 more like it, on rank 0)" in c.message


# ----------------------------------------------------------------------------------------------- rules and notes
def test_communicates_rejects_the_shortcut_and_accepts_a_call(clean):
    rule = lab.communicates()
    assert rule.says == "every rank makes at least 1 call that moves data"
    c = lab.check(alone, n=2, reference=lambda n: {"per_rank": list(range(n))}, rules=[rule], show=False)
    assert (c.ok, c.verdict) == (False, "rule"), c
    assert c.message == ("It finishes with the right values, but breaks a rule of this lab: every rank makes at"
                         " least 1 call that moves data: ranks 0 and 1 made none.")
    c = lab.check(summed, n=2, rules=[rule, lab.communicates(op="all_reduce")], show=False)
    assert (c.ok, c.verdict) == (True, "right"), c
    c = lab.check(summed, n=2, rules=[lab.communicates(op="send", says="the ranks must send")], show=False)
    assert (c.verdict, c.message) == ("rule", "It finishes with the right values, but breaks a rule of this lab:"
                                               " the ranks must send: ranks 0 and 1 made none."), c
    with pytest.raises(ValueError, match="'?sned'? is not a torch.distributed call"):
        lab.communicates(op="sned")


def test_a_note_written_in_a_rank_reaches_a_rule(clean):
    def own_blocks_only(res):
        strays = [f"rank {r} read block {n['read_block']}" for r, ns in sorted(lab.notes(res).items()) for n in ns
                  if n.get("read_block") not in (None, r)]
        return "; ".join(strays) or None

    rule = lab.Rule(says="a rank reads only its own block", found=own_blocks_only)
    c = lab.check(reads_blocks, n=2, rules=[rule], show=False)
    assert lab.notes(c.result) == {0: [{"read_block": 0, "row": [0, 7]}],
                                   1: [{"read_block": 1, "row": [1, 7]}, {"read_block": 0}]}
    assert (c.ok, c.verdict) == (False, "rule"), c
    assert c.message.endswith("a rank reads only its own block: rank 1 read block 0.")
    assert lab.check(summed, n=2, rules=[rule], show=False).ok  # no notes, nothing read elsewhere


def test_a_bug_module_s_rules_are_read_as_a_list_or_a_function():
    rule = lab.Rule(says="x", found=lambda res: None)
    assert lab.rules.module_rules(types.SimpleNamespace(LAB_RULES=[rule])) == [rule]
    assert lab.rules.module_rules(types.SimpleNamespace(LAB_RULES=lambda: [rule])) == [rule]
    assert lab.rules.module_rules(types.SimpleNamespace()) == []
    with pytest.raises(TypeError, match="must be a list of sandbox.lab.Rule"):
        lab.rules.module_rules(types.SimpleNamespace(LAB_RULES=["x"], __name__="m"))


# ----------------------------------------------------------------------------------------------- predictions
def test_kinds_lists_every_kind_the_sandbox_names(capsys):
    from sandbox.result import KIND_GLOSSARY, Kind

    named = set()
    for path in (Path(ROOT) / "sandbox").rglob("*.py"):
        text = path.read_text()
        named |= {Kind[m].value for m in re.findall(r"\bKind\.([A-Z0-9_]+)", text)}
        assert not re.findall(r'Diagnosis\(kind="', text), f"{path}: a kind is a Kind, not a string"
    assert named and named <= set(lab.KINDS), named - set(lab.KINDS)
    assert set(KIND_GLOSSARY) == set(Kind)  # every kind is said in a sentence, and the glossary invents none
    assert lab.kinds() is None  # a cell ending with it shows the table once
    out = capsys.readouterr().out
    assert all(re.search(rf"^kind\s+{k}\s+\w", out, re.M) for k in lab.KINDS), out
    assert all(re.search(rf"^verdict\s+{v}\s+\w", out, re.M) for v in ("ok", "wrong", "hang", "error", "crash")), out


def test_predict_refuses_an_unknown_kind_in_one_sentence(capsys):
    b = lab.Lab("gather-uneven")
    with pytest.raises(ValueError) as e:
        b.predict(kind="deadlock")
    assert str(e.value).startswith("'deadlock' is not a diagnosis kind the sandbox names; lab.kinds() lists them")
    assert str(e.value).count(". ") == 0 and str(e.value).endswith(").")  # one sentence
    with pytest.raises(ValueError, match=r"^'stuck' is not a verdict; a run's verdict is one of ok, wrong, hang"):
        b.predict(verdict="stuck")
    with pytest.raises(ValueError, match="culprits are rank numbers"):
        b.predict(culprits=["rank 0"])
    assert b.prediction is None and capsys.readouterr().out == ""  # nothing recorded, nothing shown


def test_a_prediction_is_graded_by_the_next_broken_run(capsys, clean):
    b = lab.Lab("gather-uneven")
    b.predict(verdict="hang", kind="p2p_cycle", culprits=[0])
    assert capsys.readouterr().out.startswith("Prediction recorded: verdict hang; kind p2p_cycle; culprits [0].")
    res = b.run("broken", n=2)
    out = capsys.readouterr().out
    g = b.last_grade
    assert res.diagnosis.kind == "collective_mismatch", res.text()
    assert g.right == {"verdict": res.verdict == "hang", "kind": False,
                       "culprits": sorted(res.diagnosis.culprit_ranks) == [0]}
    assert g.score == f"{sum(g.right.values())} of 3"
    assert "kind p2p_cycle - not quite: it is collective_mismatch (the ranks are in different collectives" in str(g)
    assert str(g) in out and str(g).startswith("Your prediction: verdict hang - ")
    assert b.prediction is None  # one prediction, one run: the next run grades nothing new
    b.run("broken", n=2, show=False)
    assert b.last_grade is g


def test_under_a_shared_runs_folder_a_run_on_the_documented_ranks_is_made_once(tmp_path, monkeypatch, clean):
    """SANDBOX_SHARED_RUNS (a test session executing the labs): `run` on the bug's documented ranks is the folder's
    one run of that variant, made by the first asker and read by the others, and still graded; a run on other
    ranks, or with other options, is the lab's own."""
    monkeypatch.setenv(bugs.SHARED_RUNS_ENV, str(tmp_path))
    b = lab.Lab("gather-uneven")
    first = b.run("broken", show=False)
    assert (tmp_path / "gather-uneven-broken.pkl").exists()
    b.predict(verdict="hang", kind="collective_mismatch", culprits=first.diagnosis.culprit_ranks, show=False)
    again = b.run("broken", show=False)
    assert [r.pid for r in again.ranks] == [r.pid for r in first.ranks] and again.wall_s == first.wall_s
    assert b.last_grade.right["kind"] and b.last_grade.right["culprits"]
    other = b.run("broken", n=b.bug.world_size + 1, show=False)
    assert {r.pid for r in other.ranks}.isdisjoint(r.pid for r in first.ranks)
    own = b.run("broken", debug="INFO", show=False)  # another option: not the documented run
    assert {r.pid for r in own.ranks}.isdisjoint(r.pid for r in first.ranks)


def test_a_finished_run_with_a_wrong_value_is_graded_wrong():
    def result(value, reference):
        ranks = [RankResult(rank=0, outcome="ok", value_bytes=pickle.dumps({"value": value, "reference": reference}))]
        return RunResult(verdict="ok", world_size=1, wall_s=0.1, diagnosis=Diagnosis(kind="none", cause=""),
                         ranks=ranks)

    p = lab.predictions.prediction("wrong", "none", [])
    assert lab.predictions.grade(p, result([1], [2])).right == {"verdict": True, "kind": True, "culprits": True}
    g = lab.predictions.grade(p, result([2], [2]))
    assert g.right["verdict"] is False and "not quite: it is ok (every rank finished" in str(g)


# ----------------------------------------------------------------------------------------------- predicted values
def test_predict_values_checks_each_rank(capsys, clean):
    c = lab.predict_values(summed, [[6]] * 3, n=3)  # ints for the floats the ranks return: the same numbers
    assert (c.ok, c.verdict, c.message) == (True, "right", "All 3 right."), c
    out = capsys.readouterr().out
    assert re.search(r"^rank\s+you predicted\s+it returned", out, re.M) and out.count("right") >= 3, out
    c = lab.predict_values(summed, {0: [6.0], 2: [3.0]}, n=3)
    assert (c.ok, c.verdict) == (False, "wrong"), c
    assert c.message == "1 of 2 right. Rank 2 returned [6.0]; you predicted [3.0]."
    assert re.search(r"^2\s+\[3\.0\]\s+\[6\.0\]\s+wrong$", capsys.readouterr().out, re.M)
    with pytest.raises(ValueError, match="predicted names rank 5, but the run has ranks 0-2"):
        lab.predict_values(summed, {5: 1}, n=3)


# ----------------------------------------------------------------------------------------------- in a real kernel
CELLS = [
    "from sandbox import lab\nb = lab.Lab('gather-uneven')\nb.show('broken')",
    "b.predict(verdict='hang', kind='collective_mismatch')",
    "res = b.run('broken', n=2)",
    "lab.kinds()",
    "import torch, torch.distributed as dist\n"
    "def ring():  # typed into a cell: it reaches the ranks by value\n"
    "    t = torch.zeros(1)\n"
    "    dist.send(t, dst=(dist.get_rank() + 1) % dist.get_world_size())\n"
    "c = lab.check(ring, n=2, expect='hang', kind='p2p_cycle')",
]


def test_the_api_in_a_notebook(tmp_path):
    """Each cell shows what it says once: the code without hints, the recorded prediction (a cell ending with
    predict does not show it twice), the run and its grade, the table of kinds, and a check of a cell's function."""
    import os

    from conftest import NOTEBOOK_PACKAGES, execute_notebook, leftovers, need

    need(*NOTEBOOK_PACKAGES)
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    env.pop("SANDBOX_WARM", None)
    execute_notebook(nb, str(tmp_path), timeout=180, env=env)

    def shown(i):
        outs = nb.cells[i].outputs
        return [plain(o["data"].get("text/html", "")) or o["data"].get("text/plain", "") if "data" in o
                else o.get("text", "") for o in outs]

    code = [o["data"]["text/plain"] for o in nb.cells[0].outputs]  # its HTML is the highlighted code
    assert len(code) == 1 and "def broken():" in code[0] and not HINTED.search(code[0]), code
    assert len(shown(1)) == 1 and shown(1)[0].startswith("Prediction recorded: verdict hang; kind"), shown(1)
    run = shown(2)
    assert len(run) == 2 and "[collective_mismatch]" in run[0], run
    assert run[1].strip().startswith("\u2714 Your prediction:") or run[1].strip().startswith("\u2718 Your"), run
    assert "kind collective_mismatch - right" in run[1]
    assert len(shown(3)) == 1 and "p2p_cycle" in shown(3)[0] and "what it means" in shown(3)[0], shown(3)
    check = shown(4)
    assert len(check) == 1 and "\u2714 Hangs" in check[0] and "It shows a hang (p2p_cycle), as asked." in check[0]
    assert leftovers() == []


def test_in_a_notebook_a_check_names_the_cell_and_the_data_dependent_if():
    """A learner's function typed into a cell: its sites read as IPython's own tracebacks name the cell ("Cell
    In[N]"), and the diagnosis reads the cell's source, so the `if` on data behind a mismatch is named there too."""
    code = '''
from sandbox import lab
from sandbox.bugs.aux_data import embedding_side, BLOCKS, TP, SUCCESS

def guarded():
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    tp = dist.get_rank()
    sent_tokens, total = (int(v) for v in embedding_side()[tp * (BLOCKS // TP)])
    if sent_tokens == 0:
        meta = torch.tensor([sent_tokens, total])
        dist.all_reduce(meta, op=dist.ReduceOp.MAX)
    status = torch.tensor([SUCCESS])
    dist.all_reduce(status, op=dist.ReduceOp.MIN)
    dist.destroy_process_group()
    return {"sent_tokens": sent_tokens}

c = lab.Lab("aux-data").check(guarded, show=False)
print("VERDICT", c.verdict)
print("SUMMARY", c.result.diagnosis.summary)
'''
    out = run_in_kernel(code, timeout=180)
    assert "<dynamic-code>" not in out, out
    assert re.search(r"Cell In\[\d+\]:\d+", out), out
    assert re.search(r"through `if sent_tokens == 0:` at Cell In\[\d+\]:\d+, whose condition reads sent_tokens", out), out
    assert "ipykernel" not in out, out


def test_a_reference_solution_stays_closed_until_the_learner_opens_it():
    """lab.solution: a closed <details> block (as the exercises' answers are), its source escaped; the build-it labs
    show every reference solution that way, never as open code next to the learner's task."""
    import glob
    import json
    import os

    from conftest import ROOT

    from sandbox.course import ring

    s = lab.solution(ring.ring_all_reduce)
    page = s._repr_html_()
    assert page.startswith("<details><summary>The reference solution (ring_all_reduce): open it once you have tried")
    assert "<details open" not in page and "def ring_all_reduce" in s.source and "def ring_all_reduce" in page
    assert "<style" not in page  # nothing that would restyle the site's own code blocks
    assert repr(s) == "The reference solution (ring_all_reduce), closed: print its .source to read it."
    for path in sorted(glob.glob(os.path.join(ROOT, "labs", "2[0-5]_*.ipynb"))):
        if "21_" in path:  # the cost model: no build-it task
            continue
        cells = ["".join(c["source"]) for c in json.load(open(path))["cells"] if c["cell_type"] == "code"]
        shown = [c for c in cells if "getsource(" in c and "def show(" not in c]
        assert shown == [], (path, shown)
        assert any("lab.solution(" in c for c in cells), path


def _empty_body():
    raise NotImplementedError  # a build-it task as the lab hands it out


def _torch_says_not_implemented():
    raise NotImplementedError("sparse all_reduce is not supported by gloo")  # a real error, with its message


def _only_rank_1_unwritten():
    import torch.distributed as dist
    if dist.get_rank() == 1:
        raise NotImplementedError
    raise ValueError("rank 0's own mistake")


def test_a_task_not_written_yet_says_to_do_and_a_real_not_implemented_error_does_not(clean):
    c = lab.check(_empty_body, n=(2, 3), reference=lambda n: 1, show=False)
    assert (c.ok, c.verdict, c.title) == (False, "todo", "To do"), c
    assert c.message.startswith("Not written yet: every rank stopped at the empty body's `raise NotImplementedError`")
    assert "On 2 ranks" not in c.message  # nothing ran: the size it stopped on says nothing
    assert 'class="sandbox-check"' in c._repr_html_() and "the run</summary>" not in c._repr_html_()
    real = lab.check(_torch_says_not_implemented, n=2, reference=lambda n: 1, show=False)
    assert real.verdict == "error" and "sparse all_reduce is not supported by gloo" in real.message, real
    mixed = lab.check(_only_rank_1_unwritten, n=2, reference=lambda n: 1, show=False)
    assert mixed.verdict == "error", mixed


def test_each_build_it_lab_has_a_task_from_an_empty_body():
    """Labs 20, 23 and 25 each hand out one task as a bare `raise NotImplementedError` (the ring's two phases, the
    ZeRO step, 1F1B's three parts), checked as the lab's other tasks are; the executed cell says To do."""
    from conftest import need

    need("nbformat")
    import nbformat
    for name, fn in (("20_ring_all_reduce", "my_ring"), ("23_sharding", "my_zero_from_nothing"),
                     ("25_pipeline", "my_1f1b_from_nothing")):
        nb = nbformat.read(str(Path(ROOT) / "labs" / f"{name}.ipynb"), as_version=4)
        cells = [c for c in nb.cells if f"def {fn}(" in c.source]
        assert len(cells) == 1, name
        body = cells[0].source.split(f"def {fn}(", 1)[1].split("\n\n\n", 1)[0].splitlines()[1:]
        assert [line.strip().split("#")[0].strip() for line in body] == ["raise NotImplementedError"], body
        assert "To do: Not written yet" in cells[0].metadata["expect"], name
