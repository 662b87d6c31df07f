"""The checks of labs 11-13 (the DDP bugs) tell a right fix from a wrong one: each accepts the catalogue's own fix
(and the other fix the lab teaches, where there is one), and rejects the broken code and a wrong fix people really
try, for its reason. Also the DDP rules these labs lean on, at unit level: the data-dependent branch that skips a
layer, and a model with a layer more on one rank.

Every check starts real gloo ranks (the bug's own number), like tests/test_labs.py's labs do.
"""
import datetime
import os
import textwrap

import pytest
from conftest import run_cli

from sandbox import lab
from sandbox.diagnose import framework


def _uneven_train(no_sync_past_minimum=False):
    """DDP over ddp-uneven-inputs' shards, without Join; with `no_sync_past_minimum` the wrong fix: the ranks agree
    on the smallest number of batches and run the steps past it under `model.no_sync()`, hoping to keep the extra
    batch without an all_reduce that has no partner."""
    import contextlib

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from sandbox.bugs.ddp_uneven_inputs import LR, make_model, shard, weights
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    net = make_model()
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    mine = shard(rank, world)
    n = torch.tensor([len(mine)])
    dist.all_reduce(n, op=dist.ReduceOp.MIN)
    for i, (x, y) in enumerate(mine):
        quiet = model.no_sync() if no_sync_past_minimum and i >= int(n) else contextlib.nullcontext()
        with quiet:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
        opt.step()
    out = weights(net)
    dist.destroy_process_group()
    return out


def _uneven_no_sync():
    return _uneven_train(no_sync_past_minimum=True)


def _unused_train(how):
    """ddp-unused-parameters' training with the forward changed `how`: "find_unused" (the forward as it is, the
    flag on: the other right fix), "detach" (the wrong fix: run self.vision on every rank but detach its output
    where the batch has no image, so that it still gets no gradient there), "broken"."""
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
    out = train(model, torch.device("cpu"), find_unused_parameters=how == "find_unused")
    dist.destroy_process_group()
    return out


def _vocab_train(how):
    """ddp-model-differs' training with the vocabulary agreed `how`: "broadcast" (rank 0 builds it from the whole
    corpus and broadcasts it: right), "max_size" (the wrong fix: every rank keeps its own words, the model is made
    as big as the largest vocabulary, agreed with all_reduce MAX, so DDP's check passes), "local" (the bug)."""
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
    drift = b.check(_uneven_no_sync, show=False)  # finishes, but rank 3's weights drift from the others'
    assert not drift.ok and drift.verdict == "wrong", drift
    assert drift.message.startswith("Rank 0 returned a wrong value"), drift


def test_lab_12_accepts_both_fixes_and_rejects_the_bug_and_a_detached_layer(clean):
    b = lab.Lab("ddp-unused-parameters")
    assert b.check(b.module.fixed, show=False).ok
    flag = b.check(lambda: _unused_train("find_unused"), show=False)
    assert flag.ok, flag  # the other fix: the same averaged gradients
    for how in ("broken", "detach"):  # a detached output reaches no parameter: the same error as the bug
        c = b.check(lambda how=how: _unused_train(how), show=False)
        assert not c.ok and c.verdict in ("error", "hang"), (how, c)
        assert "vision.weight and vision.bias got no gradient on ranks 1-3" in c.message, (how, c)


def test_lab_13_accepts_an_agreed_vocabulary_and_rejects_the_bug_and_agreeing_on_the_size_only(clean):
    b = lab.Lab("ddp-model-differs")
    assert b.check(b.module.fixed, show=False).ok
    assert b.check(lambda: _vocab_train("broadcast"), show=False).ok
    broken = b.check(lambda: _vocab_train("local"), show=False)
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
    got = framework._branch_using([str(src)], ["vision"])
    assert got is not None and got["test"] == "image is not None" and got["attrs"] == ["vision"], got
    assert got["site"].endswith("model.py:5"), got
    assert framework._branch_using([str(src)], ["text"]) is None  # nothing uses self.text under an if
    assert framework._branch_using([str(tmp_path / "missing.py")], ["vision"]) is None


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
