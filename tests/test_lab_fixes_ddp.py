"""The checks of labs 11-13 (the DDP bugs) tell a right fix from a wrong one: each accepts the catalogue's own fix
(and the other fix the lab teaches, where there is one), and rejects the broken code and a wrong fix people really
try, for its reason. Also the DDP rules these labs lean on, at unit level: the data-dependent branch that skips a
layer, and a model with a layer more on one rank; and lab 10's exercise checks.

Where a lab's exercise holds the wrong fix (or the starting function), the test runs the notebook's own function
(`lab_function`), so the exercise cannot drift from what its hidden answer says.

Every check starts real gloo ranks (the bug's own number), like tests/test_labs.py's labs do.
"""
import datetime
import os
import re
import textwrap

import pytest
from conftest import ROOT, run_cli

from sandbox import lab
from sandbox import branches


CALLS = re.compile(r"^(lab|b)\.(check|run|show|predict|kinds)\(|^c = b\.check\(|^print\(")


def lab_function(notebook: str, name: str):
    """The function `name` as the exercise cell of labs/<notebook>.ipynb defines it, with the imports of every code
    cell before it: the notebook's own code, not a copy. The cell's calls (`b.check(...)`, `print(...)`) are left
    out. Defined with no module name, so the sandbox sends it to the ranks by value, as it sends a notebook's."""
    nbformat = pytest.importorskip("nbformat", reason="needs the optional package nbformat")
    nb = nbformat.read(os.path.join(ROOT, "labs", notebook + ".ipynb"), as_version=4)
    imports, found = [], None
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.source.startswith("%"):
            continue
        if re.search(rf"^def {name}\(", cell.source, re.M):
            found = cell.source
            break
        imports += [line for line in cell.source.splitlines() if re.match(r"(import|from) \S", line)]
    assert found is not None, f"{notebook} defines no function {name}"
    body = "\n".join(line for line in found.splitlines() if not CALLS.match(line))
    space = {}  # no __name__: the function's module is None, so it is sent by value
    exec(compile("\n".join(imports) + "\n" + body, f"<{notebook}>", "exec"), space)
    return space[name]


def _unused_train(how):
    """ddp-unused-parameters' training with the forward changed `how`: "detach" (the wrong fix: run self.vision on
    every rank but detach its output where the batch has no image, so that it still gets no gradient there) or
    "broken" (the forward as it is)."""
    import torch
    import torch.distributed as dist

    from sandbox.bugs.ddp_unused_parameters import IMAGE, Captioner, train

    class Detached(Captioner):
        def forward(self, tokens, image=None):
            h = torch.tanh(self.text(tokens))
            if image is not None:
                return self.head(h + self.vision(image))
            v = self.vision(tokens.new_zeros(tokens.shape[0], IMAGE))
            return self.head(h + 0 * v.detach())

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    model = Detached() if how == "detach" else Captioner()
    out = train(model, torch.device("cpu"))
    dist.destroy_process_group()
    return out


def _vocab_train(how):
    """ddp-model-differs' training with the vocabulary agreed `how`: "broadcast" (rank 0 builds it from the whole
    corpus and broadcasts it: right), "max_size" (the wrong fix: every rank keeps its own words, the model is made
    as big as the largest vocabulary, agreed with all_reduce MAX, so DDP's check passes)."""
    import torch
    import torch.distributed as dist

    from sandbox.bugs.ddp_model_differs import CORPUS, shard, train, words_of
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = shard(rank, world)
    vocab = sorted(words_of(mine))
    if how == "broadcast":
        box = [sorted(words_of(CORPUS)) if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        vocab = box[0]
    elif how == "max_size":
        size = torch.tensor([len(vocab)])
        dist.all_reduce(size, op=dist.ReduceOp.MAX)
        vocab = vocab + [f"<pad{i}>" for i in range(int(size) - len(vocab))]
    out = train(vocab, mine, torch.device("cpu"))
    dist.destroy_process_group()
    return out


def _check(slug, fn):
    return lab.Lab(slug).check(fn, show=False)


def test_lab_11_accepts_join_and_rejects_the_bug_and_no_sync_past_the_minimum(clean):
    b = lab.Lab("ddp-uneven-inputs")
    assert b.check(b.module.fixed, show=False).ok
    broken = b.check(b.module.broken, show=False)  # the lab's pre-filled code, as the catalogue has it
    assert not broken.ok and broken.verdict in ("error", "hang"), broken
    assert "ran more training steps" in broken.message, broken
    # the lab's exercise: the steps past the agreed minimum under no_sync(); finishes, but the replicas drift apart
    drift = b.check(lab_function("11_ddp_uneven_inputs", "no_sync_past_the_minimum"), show=False)
    assert not drift.ok and drift.verdict == "wrong", drift
    assert drift.message.startswith("Rank 0 returned a wrong value"), drift


def test_lab_12_accepts_both_fixes_and_rejects_the_bug_and_a_detached_layer(clean):
    b = lab.Lab("ddp-unused-parameters")
    assert b.check(b.module.fixed, show=False).ok
    flag = b.check(lab_function("12_ddp_unused_parameters", "with_the_flag"), show=False)
    assert flag.ok, flag  # the other fix (the lab's exercise): the same averaged gradients
    for how in ("broken", "detach"):  # a detached output reaches no parameter: the same error as the bug
        c = b.check(lambda how=how: _unused_train(how), show=False)
        assert not c.ok and c.verdict in ("error", "hang"), (how, c)
        assert "vision.weight and vision.bias got no gradient on ranks 1-3" in c.message, (how, c)


def test_lab_13_accepts_an_agreed_vocabulary_and_rejects_the_bug_and_agreeing_on_the_size_only(clean):
    b = lab.Lab("ddp-model-differs")
    assert b.check(b.module.fixed, show=False).ok
    assert b.check(lambda: _vocab_train("broadcast"), show=False).ok
    broken = b.check(lab_function("13_ddp_model_differs", "broadcast_vocabulary"), show=False)  # as it comes
    assert not broken.ok and "parameter embed.weight differs: rank 3 has [9, 8]" in broken.message, broken
    sized = b.check(lambda: _vocab_train("max_size"), show=False)  # DDP's check passes; the ids differ
    assert not sized.ok and sized.verdict == "wrong", sized
    assert "['vocab']" in sized.message, sized


# ------------------------------------------------------------------------------------------ the rules, unit level

def test_a_data_dependent_branch_is_found_by_the_attribute_it_uses(tmp_path):
    src = tmp_path / "model.py"
    src.write_text(textwrap.dedent("""\
        class M:
            def forward(self, x, image=None):
                if x is None:
                    return None
                if image is not None:
                    x = x + self.vision(image)
                return self.head(x)
        """))
    got = branches.branch_using([str(src)], ["vision"], rank_dependent=False)
    assert got is not None and got["test"] == "image is not None" and got["attrs"] == ["vision"], got
    assert got["site"].endswith("model.py:5"), got
    assert branches.branch_using([str(src)], ["text"], rank_dependent=False) is None  # nothing uses self.text under an if
    assert branches.branch_using([str(tmp_path / "missing.py")], ["vision"], rank_dependent=False) is None


DEEPER = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
depth = 2 if dist.get_rank() == 2 else 1
model = DDP(torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(depth)]))
dist.destroy_process_group()
"""


def test_a_layer_more_on_one_rank_is_named_by_the_count_of_parameters(tmp_path, clean):
    import json

    script = tmp_path / "deeper.py"
    script.write_text(DEEPER)
    p = run_cli("sandbox.run", "-n", "4", "--json", str(script), timeout=180)
    assert p.returncode == 1, p.stdout + p.stderr
    d = json.loads(p.stdout)["diagnosis"]
    assert (d["kind"], d["culprit_ranks"]) == ("model_differs", [2]), d
    assert d["site"].endswith("deeper.py:7"), d
    assert "the number of parameters differs: rank 2 has 4; ranks 0, 1 and 3 have 2" in d["summary"], d
    assert d["details"]["param_counts"] == {"4": [2], "2": [0, 1, 3]}, d


@pytest.mark.parametrize("slug", ["ddp-uneven-inputs", "ddp-unused-parameters", "ddp-model-differs"])
def test_the_lab_exists_for_each_ddp_bug(slug):
    names = os.listdir(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "labs"))
    assert any(n.endswith(slug.replace("-", "_") + ".ipynb") for n in names), names


# ------------------------------------------------------------------------------------------ lab 10's exercises

def test_lab_10_a_slow_rank_fails_the_monitored_barrier_and_a_wrong_prediction_is_told(clean):
    """Exercise 1: a rank 1 s late at a 0.5 s monitored_barrier is an error, named on rank 0; the check passes for
    the prediction "error" and not for "hang" (the same run, judged again)."""
    from sandbox.lab.checks import judged

    c = lab.check(lab_function("10_toolbox", "slow_rank_at_the_barrier"), n=4, expect="error", show=False)
    assert c.ok and c.verdict == "error", c
    assert "Rank 0 raised RuntimeError: [Rank 0]: Ranks 2 failed to pass monitoredBarrier in 500 ms" in c.message, c
    wrong = judged(c.result, None, expect="hang", kind=None, culprits=None, rules=(), lenient=False, rtol=None,
                   atol=None)
    assert not wrong.ok and wrong.message.startswith("You asked for a hang, but it fails"), wrong


def test_lab_10_the_same_shape_twice_is_named_at_the_second_call(clean):
    """Exercise 2: rank 2 skips the first of two all_reduces of one shape: the first pairs with its second, and the
    mismatch is named at call #2 (the broadcast): a hang, collective_mismatch. A prediction of another kind or of
    a run that finishes is not accepted."""
    from sandbox.lab.checks import judged

    c = lab.check(lab_function("10_toolbox", "rank_2_skips_the_first"), n=4, expect="hang",
                  kind="collective_mismatch", show=False)
    assert c.ok and c.result.diagnosis.kind == "collective_mismatch", c
    assert "#2" in c.result.diagnosis.summary, c.result.diagnosis.summary
    for expect, kind in (("hang", "missing_ranks"), ("right", None)):
        wrong = judged(c.result, None, expect=expect, kind=kind, culprits=None, rules=(), lenient=False, rtol=None,
                       atol=None)
        assert not wrong.ok, (expect, kind, wrong)
