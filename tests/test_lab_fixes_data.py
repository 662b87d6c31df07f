"""The checks of labs 14, 15 and 19 (sampler-set-epoch, no-sync-accumulation, mixed-dtype) on real gloo ranks: each
accepts the catalogue's own fix and rejects the broken code and the wrong fixes people really try:

- sampler-set-epoch: `sampler.set_epoch(0)` every epoch (the call is there, the epoch is not), and `set_epoch(epoch)`
  on a sampler whose batches were listed once before the epoch loop (the order was drawn once, at listing);
- no-sync-accumulation: keeping each rank's own accumulation count but reducing the gradients by hand at each of
  its own steps (the all_reduces still come on different micro-steps);
- mixed-dtype: casting the all_reduce's result back to float32 (too late: the reduce itself mixes dtypes), and
  casting the gradient to float32 before reducing while rank 1 keeps its bfloat16 model (the bytes agree, the
  replicas do not).

Also: sampler-set-epoch's broken variant is as documented only because its order differs from the reference (a run
that happened to be right is rejected), and the check's answers name the cause in the user's terms.

The wrong fixes the labs' exercises hold are run as the notebooks define them (`lab_function`), so an exercise
cannot drift from what its hidden answer says.
"""
import importlib

import pytest
from test_lab_fixes_ddp import lab_function

from sandbox import lab
from sandbox.bugs import registry, run_variant, unmet_expectations

pytestmark = pytest.mark.usefixtures("clean")


# --------------------------------------------------------------------------------------- sampler-set-epoch

def _sampler_loop(set_epoch):
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    from sandbox.bugs import init
    from sandbox.bugs.sampler_set_epoch import BATCH, EPOCHS, SEED, dataset

    init()
    sampler = DistributedSampler(dataset(), shuffle=True, seed=SEED)
    loader = DataLoader(dataset(), batch_size=BATCH, sampler=sampler)
    order = {}
    for epoch in range(EPOCHS):
        set_epoch(sampler, epoch)
        order[f"epoch {epoch}"] = [int(i) for index, _ in loader for i in index]
    dist.barrier()  # no collective above: without it a fast rank may leave while a slow one still connects
    dist.destroy_process_group()
    return order


def set_epoch_zero_every_epoch():
    return _sampler_loop(lambda sampler, epoch: sampler.set_epoch(0))


def test_sampler_lab_check():
    b = lab.Lab("sampler-set-epoch")
    right = b.check(b.module.fixed, show=False)
    assert right.ok and right.verdict == "right", right
    listed_once = lab_function("14_sampler_set_epoch", "set_epoch_on_batches_listed_once")  # the lab's exercise
    for wrong in (b.module.broken, set_epoch_zero_every_epoch, listed_once):
        c = b.check(wrong, show=False)
        assert not c.ok and c.verdict == "wrong", (wrong.__name__, c)
        # epoch 0 is right: the first difference is in epoch 1, against the reference with set_epoch
        assert "['epoch 1']" in c.message and "single-process reference" in c.message, c.message


def test_sampler_broken_is_documented_only_while_its_order_differs():
    bug = registry()["sampler-set-epoch"]
    want = importlib.import_module(bug.module).reference(world_size=bug.world_size)
    res, _, _ = run_variant(bug, "broken", bug.world_size)
    assert res.verdict == "ok", res.diagnosis.summary
    assert unmet_expectations(bug.broken, res, reference=want) == []
    right, _, _ = run_variant(bug, "fixed", bug.world_size)  # the twin: a right order is not the bug's symptom
    assert unmet_expectations(bug.broken, right, reference=want) == [
        "every rank's value equals the single-process reference, so the wrong answer did not show"]


# --------------------------------------------------------------------------------------- no-sync-accumulation

def test_no_sync_lab_check():
    b = lab.Lab("no-sync-accumulation")
    right = b.check(b.module.fixed, show=False)
    assert right.ok, right
    broken = b.check(b.module.broken, show=False)
    assert not broken.ok and broken.verdict in ("error", "crash", "hang"), broken
    assert broken.result.diagnosis.kind == "uneven_steps" and broken.result.diagnosis.culprit_ranks == [0], broken
    assert "loss.backward()" in broken.message, broken.message  # DDP's all_reduce is named at the user's line
    # the lab's exercise: each rank keeps its own count and reduces by hand at each of its own steps (3 on rank
    # 0, 2 on rank 1), so the ranks' all_reduces still disagree
    wrong = b.check(lab_function("15_no_sync_accumulation", "local_count_reduced_by_hand"), show=False)
    assert not wrong.ok and wrong.verdict in ("error", "crash", "hang"), wrong
    # rank 0's fifth all_reduce (its third step) waits for rank 1, which made its last at its second step
    assert (wrong.result.diagnosis.kind, wrong.result.diagnosis.culprit_ranks) == ("missing_ranks", [1]), wrong
    assert "rank 1 never arrives" in wrong.message, wrong.message


# --------------------------------------------------------------------------------------- mixed-dtype

def _mixed_loop(reduce):
    """mixed-dtype's broken loop (rank 1 in bfloat16) with `reduce(grad, world)` in place of its all_reduce."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from sandbox.bugs import init
    from sandbox.bugs.mixed_dtype import LR, STEPS, batch, bf16_supported, weights

    init()
    rank, world = dist.get_rank(), dist.get_world_size()
    use_bf16 = bf16_supported(rank)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(torch.bfloat16 if use_bf16 else torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        x, y = batch(rank, step)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16):
            loss = F.mse_loss(model(x.to(model.weight.dtype)), y.to(model.weight.dtype))
        loss.backward()
        for p in model.parameters():
            reduce(p, world)
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
    return weights(model)


def result_cast_back_after_a_mixed_reduce():
    import torch.distributed as dist

    def reduce(p, world):
        g = p.grad
        dist.all_reduce(g)  # still bfloat16 on rank 1
        p.grad = (g.float() / world).to(p.dtype)
    return _mixed_loop(reduce)


def test_mixed_dtype_lab_check():
    b = lab.Lab("mixed-dtype")
    right = b.check(b.module.fixed, show=False)
    assert right.ok, right
    for wrong in (b.module.broken, result_cast_back_after_a_mixed_reduce):
        c = b.check(wrong, show=False)
        assert not c.ok and c.verdict in ("crash", "hang", "error"), (wrong.__name__, c)
        d = c.result.diagnosis
        assert (d.kind, d.culprit_ranks) == ("collective_mismatch", [1]), d.summary
        # the dtype per rank, and the way out, in the user's terms (sandbox/diagnose/mismatch.py)
        assert "rank 1 calls all_reduce(shape [4, 8], bfloat16)" in d.summary, d.summary
        assert "float32" in d.summary and "give every rank the same precision" in d.summary, d.summary
    # the lab's exercise: every rank reduces float32, but rank 1 keeps its bfloat16 model: its weights drift
    drift = b.check(lab_function("19_mixed_dtype", "gradient_cast_but_model_left_in_bfloat16"), show=False)
    assert not drift.ok and drift.verdict == "wrong", drift
    assert "single-process reference" in drift.message, drift.message

