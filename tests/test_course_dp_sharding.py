"""Labs 22 (data parallelism) and 23 (sharding): each check the labs use accepts the reference solution and rejects
the code the lab starts the learner with, the bug it shows, and a plausible wrong attempt, on real gloo ranks.

The starting code of the labs' "your task" cells is copied here (`_local_only`, `_SyncAfterBackward`): the lab
cannot import it from the notebook, and a test that held only the module's own attempts could pass while the
notebook's starting code slipped through the check. The memory counts are checked against what they must be for
this model (467 parameters, 468 once padded for 4 ranks), not against a run of the same code.
"""
import json
import os

import pytest
from conftest import ROOT

torch = pytest.importorskip("torch")

from sandbox import lab  # noqa: E402
from sandbox.course import data_parallel as dp  # noqa: E402
from sandbox.course import dp_timing  # noqa: E402
from sandbox.course import sharding as sh  # noqa: E402


def _check(fn, n=4, reference=None, **kw):
    return lab.check(fn, n=n, reference=reference, show=False, **kw)


# ------------------------------------------------------------------------------------------------ lab 22
def _local_only():
    """Lab 22's starting `my_naive`: every rank trains on its own slice, no communication."""
    import torch.distributed as dist
    rank, world = dist.get_rank(), dist.get_world_size()
    model = dp.make_model()
    opt = torch.optim.SGD(model.parameters(), lr=dp.LR)
    for step in range(dp.STEPS):
        x, y, hard = dp.local(step, rank, world)
        opt.zero_grad()
        dp.loss_fn(model(x, hard), y).backward()
        opt.step()
    return dp.weights(model)


class _SyncAfterBackward:
    """Lab 22's starting `MyBuckets`: the hook only counts; finish() makes every call after backward."""

    def __init__(self, model, cap_bytes=dp.CAP_BYTES):
        import torch.distributed as dist
        self.model, self.world, self.ready = model, dist.get_world_size(), 0
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self.hook)

    def hook(self, p):
        self.ready += 1

    def finish(self):
        import torch.distributed as dist
        for p in self.model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
            p.grad /= self.world
        self.ready = 0


def _train(wrap):
    return dp.train(wrap)


def test_the_naive_check_accepts_the_reference_and_rejects_the_starting_code(clean):
    assert _check(dp.naive, reference=dp.reference).ok
    c = _check(_local_only, reference=dp.reference)
    assert not c.ok and c.verdict == "wrong", c


def test_the_lab_22_bug_is_a_collective_mismatch_caused_by_rank_3(clean):
    c = _check(dp.skip_none, reference=dp.reference)
    assert not c.ok and c.verdict in ("crash", "hang", "error"), c
    assert c.result.diagnosis.kind == "collective_mismatch", c
    assert "[4, 16]" in c.message, c.message
    # the prediction the lab pre-fills (a wrong answer) is graded wrong; the right one is graded right
    assert not _check(dp.skip_none, reference=dp.reference, expect="wrong").ok
    said = _check(dp.skip_none, reference=dp.reference, expect=c.verdict, kind="collective_mismatch")
    assert said.ok, said


def test_forgetting_to_divide_by_the_world_size_is_a_wrong_answer(clean):
    c = _check(_train, args=(dp.NoDivide,), reference=lambda n, wrap: dp.reference(n))
    assert not c.ok and c.verdict == "wrong", c


def test_the_bucket_check_accepts_the_reference_and_holds_the_overlap_rule(clean):
    c = _check(dp.bucketed, reference=dp.reference, rules=[dp.OVERLAP])
    assert c.ok, c
    starting = _check(_train, args=(_SyncAfterBackward,), reference=lambda n, wrap: dp.reference(n),
                      rules=[dp.OVERLAP])
    assert not starting.ok and starting.verdict == "rule", starting
    assert "started no asynchronous all_reduce while backward was running" in starting.message, starting.message


def test_a_bucket_never_waited_on_is_not_right(clean):
    c = _check(_train, args=(dp.Unwaited,), reference=lambda n, wrap: dp.reference(n), rules=[dp.OVERLAP])
    assert not c.ok and c.verdict in ("wrong", "contract"), c


def test_buckets_started_out_of_order_mismatch(clean):
    """Lab 22's exercise 3, with DETAIL as the lab runs it: without it gloo aborts in its own thread on an async call
    already in flight, and what the sandbox can name depends on the timing."""
    c = _check(_train, args=(dp.AsSoonAsComplete,), reference=lambda n, wrap: dp.reference(n), debug="DETAIL")
    assert not c.ok and c.result.diagnosis.kind == "collective_mismatch", c
    assert c.result.diagnosis.culprit_ranks == [3], c


def test_the_timing_table_and_the_overlap_lines_read_a_real_run(clean):
    c = _check(dp_timing.bench)
    assert c.ok, c
    table = dp_timing.timings(c.result)
    for name, calls in (("naive", 14), ("buckets", 6), ("DDP", 6)):
        assert any(line.split()[0] == name and line.split()[-1] == str(calls) for line in table.splitlines()), table
    o = _check(dp_timing.overlap)
    assert o.ok, o
    for r in o.result.ranks:  # every bucket's last gradient lands inside backward: each starts there
        assert len(r.value["started"]) == 6 and all(s <= r.value["backward"] for s in r.value["started"]), r.value


# ------------------------------------------------------------------------------------------------ lab 23
def _plain_adam():
    """Right values, the rule broken: an all_reduce of the whole gradient and Adam over every parameter."""
    import torch.distributed as dist
    rank, world = dist.get_rank(), dist.get_world_size()
    model = sh.make_model()
    adam = torch.optim.Adam(model.parameters(), lr=sh.LR)
    for step in range(sh.STEPS):
        x, y = sh.local(step, rank, world)
        adam.zero_grad()
        sh.loss_fn(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        adam.step()
    return sh.weights(model)


class _LocalGradient(sh.GatheredLinear):
    """Wrong: the backward keeps this rank's part of its own gradient, and never reduce-scatters it. (Forgetting
    only the division is no wrong attempt here: Adam's step hardly changes when every gradient is 4 times larger.)"""

    @staticmethod
    def backward(ctx, gy):
        import torch.distributed as dist
        (x,) = ctx.saved_tensors
        layer = ctx.layer
        w, _ = layer.gather()
        grad = layer.padded(torch.cat([(gy.T @ x).reshape(-1), gy.sum(0)]))
        rank = dist.get_rank()
        return gy @ w, grad[rank * layer.size:(rank + 1) * layer.size].clone(), None


def test_the_zero_check_accepts_the_reference_on_3_and_4_ranks(clean):
    for n in (4, 3):
        c = _check(sh.zero, n=n, reference=sh.reference, rules=[sh.SCATTERS])
        assert c.ok, (n, c)


def test_the_lab_23_bug_unpadded_shards_fail_with_their_sizes(clean):
    c = _check(sh.zero_unpadded, reference=sh.reference, rules=[sh.SCATTERS])
    assert not c.ok and c.verdict in ("error", "crash", "hang"), c
    assert "468 vs. 467" in c.message and "464 vs. 467" in c.message, c.message  # ranks 0-2, and rank 3


def test_the_zero_check_rejects_gathering_before_stepping_and_an_unsharded_optimizer(clean):
    c = _check(sh.gather_first, reference=sh.reference, rules=[sh.SCATTERS])
    assert not c.ok and c.verdict == "wrong", c
    plain = _check(_plain_adam, reference=sh.reference, rules=[sh.SCATTERS])
    assert not plain.ok and plain.verdict == "rule", plain


def _fsdp(function):
    return sh.fsdp(function)


def test_the_fsdp_check_accepts_the_reference_and_rejects_kept_parameters_and_a_local_gradient(clean):
    assert _check(sh.fsdp, reference=sh.reference, rules=[sh.REGATHER]).ok
    kept = _check(_fsdp, args=(sh.KeptLinear,), reference=lambda n, f: sh.reference(n), rules=[sh.REGATHER])
    assert not kept.ok and kept.verdict == "rule", kept
    local = _check(_fsdp, args=(_LocalGradient,), reference=lambda n, f: sh.reference(n), rules=[sh.REGATHER])
    assert not local.ok and local.verdict == "wrong", local


def test_memory_per_rank_is_a_quarter_for_what_is_sharded(clean):
    c = _check(sh.measured)
    assert c.ok, c
    held = c.result.ranks[0].value
    p, padded = 467 * 4, 468 * 4  # bytes of the parameters, and of the vector padded for 4 ranks
    assert held["data parallel"] == {"parameters": p, "gradients": p, "optimizer state": 2 * p + 6 * 4}
    assert held["ZeRO-1"] == {"parameters": padded, "gradients": padded, "optimizer state": 2 * padded // 4 + 4}
    assert held["ZeRO-2"] == {"parameters": padded, "gradients": padded // 4, "optimizer state": 2 * padded // 4 + 4}
    # FSDP pads each layer on its own: 144, 272 and 51 numbers make parts of 36, 68 and 13 (117 in all)
    assert held["FSDP"] == {"parameters": 117 * 4, "gradients": 117 * 4, "optimizer state": 2 * 117 * 4 + 3 * 4}
    assert "FSDP" in sh.memory_table(c.result) and "(0.25x)" in sh.memory_table(c.result)
    # within a step: backward's whole gradient and the padded copy to reduce-scatter are alive together (lab 23 says
    # so: the table's rows are what a rank holds between steps, not its peak)
    assert held[sh.PEAK] == {"data parallel": p, "ZeRO-1": p + padded, "ZeRO-2": p + padded}
    assert "ZeRO-2 3740 (2.00x)" in sh.memory_table(c.result)


def test_the_lab_22_answer_says_which_calls_paired_what(clean):
    """Lab 22's answer to its mismatch: calls #5 and #6 pair rank 3's `extra` gradients with the others' `head`
    gradients (the same shapes: summed without a word), and the crash comes at #7, where rank 3's head.weight meets
    the next step's body.0.weight. Held against the model's parameter order and the run's trace, and against the
    lab's text (which once said rank 3's extra.weight met body.0.weight at once)."""
    import json
    import os

    names = [n for n, _ in dp.make_model().named_parameters()]
    assert names.index("extra.weight") < names.index("head.weight")
    c = _check(dp.skip_none, reference=dp.reference)
    reduces = {r: [e for e in c.result.events if e.get("rank") == r and e.get("ev") == "enter"
                   and e.get("op") == "all_reduce"] for r in range(4)}
    shapes = {r: [e["shapes"][0] for e in evs] for r, evs in reduces.items()}
    for r in range(3):  # ranks 0-2: the 6 gradients they have (body.0, body.2, head), then step 1's body.0.weight
        assert shapes[r][:7] == [[16, 8], [16], [16, 16], [16], [4, 16], [4], [16, 8]], shapes[r]
    # rank 3: its 8 gradients in parameter order, extra's before head's: #5, #6 are extra's, #7 head.weight
    assert shapes[3][:7] == [[16, 8], [16], [16, 16], [16], [4, 16], [4], [4, 16]], shapes[3]
    assert [names[i] for i in (4, 5, 6)] == ["extra.weight", "extra.bias", "head.weight"]
    assert "call #7" in c.message, c.message
    with open(os.path.join(os.path.dirname(__file__), "..", "labs", "22_data_parallel.ipynb")) as f:
        answer = next("".join(cell["source"]) for cell in json.load(f)["cells"]
                      if "Think about it before you open the answer" in "".join(cell["source"]))
    assert "calls #5 and #6 pair rank 3's" in answer and "The first call\nwhose shapes differ is #7" in answer, answer


def _zero_full_adam():
    """ZeRO's communication, but Adam over the whole (padded) vector, fed only this rank's part of the gradient:
    the same weights, every rank holding the whole optimizer state (what ZeRO exists to shard)."""
    import torch.distributed as dist
    from torch.nn.utils import parameters_to_vector

    from sandbox import compat
    rank, world = dist.get_rank(), dist.get_world_size()
    model = sh.make_model()
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    size = -(-total // world)
    flat = torch.zeros(size * world)
    flat[:total] = parameters_to_vector(params).detach()
    full = torch.nn.Parameter(flat.clone())
    adam = torch.optim.Adam([full], lr=sh.LR)
    for step in range(sh.STEPS):
        x, y = sh.local(step, rank, world)
        model.zero_grad(set_to_none=True)
        sh.loss_fn(model(x), y).backward()
        grads = torch.zeros(size * world)
        grads[:total] = torch.cat([p.grad.reshape(-1) for p in params])
        mine = torch.empty(size)
        compat.reduce_scatter_single(mine, grads)
        g = torch.zeros(size * world)
        g[rank * size:(rank + 1) * size] = mine / world
        full.grad = g
        adam.step()
        compat.all_gather_single(flat, full.detach()[rank * size:(rank + 1) * size].clone())
        start = 0
        for p in params:
            p.data.copy_(flat[start:start + p.numel()].view_as(p))
            start += p.numel()
    return sh.weights(model)


def test_zeros_check_holds_each_rank_to_the_state_of_its_own_part(clean):
    """sh.STATE reads the tracer's `optim` events: the reference ZeRO steps ceil(467 / N) parameters a rank; an
    Adam over the whole vector gives the right weights with N times the state, and is told with its numbers."""
    assert _check(sh.zero, n=3, reference=sh.reference, rules=[sh.SCATTERS, sh.STATE]).ok
    c = _check(_zero_full_adam, n=4, reference=sh.reference, rules=[sh.SCATTERS, sh.STATE])
    assert not c.ok and c.verdict == "rule", c
    assert "steps 468 parameters and holds 936 numbers of state" in c.message and "at most 117 of the 467" in c.message


def test_zeros_state_rule_wants_an_optimizer_step_it_can_see():
    from sandbox.result import Diagnosis, RankResult, RunResult
    res = RunResult(verdict="ok", world_size=2, wall_s=1.0, diagnosis=Diagnosis(kind="none", cause=""),
                    ranks=[RankResult(rank=r, outcome="ok") for r in range(2)],
                    events=[{"ev": "optim", "rank": 0, "op": "Adam", "params": 234, "state": 468, "site": "x.py:1"}])
    assert sh.STATE.found(res) == ("rank 1 made no torch.optim step the check could see: step this rank's part with"
                                   " torch.optim.Adam, as the lab does")


class _RegatherButKeep(sh.GatheredLinear):
    """Gathers the layer again for backward, as REGATHER counts, but keeps the forward's full weight on ctx too."""

    @staticmethod
    def forward(ctx, x, shard, layer):
        w, b = layer.gather()
        ctx.save_for_backward(x)
        ctx.layer, ctx.kept = layer, w
        return x @ w.T + b


def test_fsdps_check_tells_a_layer_that_kept_its_forward_copy(clean):
    """sh.FREES: when the backward begins, the autograd graph holds the full copy a layer gathered for its forward,
    however it was kept (saved for backward, or an attribute of ctx). The reference saves only its input."""
    rules = [sh.REGATHER, sh.FREES, sh.SCATTERS]
    assert _check(sh.fsdp, n=3, reference=sh.reference, rules=rules).ok
    for kept_by in (sh.KeptLinear, _RegatherButKeep):
        c = _check(_fsdp, args=(kept_by,), reference=lambda n, f: sh.reference(n), rules=[sh.FREES])
        assert not c.ok and c.verdict == "rule", c
        said = "layers 0, 2 and 4 kept the full parameters gathered for the forward for the backward"
        assert said in c.message, c.message


def ddp_grads_when_backward_returns():
    """On a rank: DDP's gradient as loss.backward() returns, against the average of every rank's own gradient."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model, alone = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
    alone.load_state_dict(model.state_dict())
    ddp = DDP(model)
    x = torch.full((2, 4), float(dist.get_rank() + 1))  # each rank its own data: its own gradient differs
    ddp(x).sum().backward()
    got = ddp.module.weight.grad.clone()  # nothing else ran since backward returned
    alone(x).sum().backward()
    mean = alone.weight.grad.clone()
    dist.all_reduce(mean)
    mean /= dist.get_world_size()
    return torch.allclose(got, mean), torch.allclose(alone.weight.grad, mean)


def test_ddp_averages_the_gradients_inside_backward_as_lab_22_says(clean):
    """Lab 22: DDP waits for its buckets at the end of backward, so loss.backward() returns with every .grad the
    average over the ranks (not this rank's own), before any optimizer step."""
    from sandbox import launch

    res = launch(ddp_grads_when_backward_returns, world_size=2, init=True)
    assert res.verdict == "ok", res.diagnosis.summary
    assert res.values == [(True, False)] * 2
    nb = json.load(open(os.path.join(ROOT, "labs", "22_data_parallel.ipynb")))
    text = " ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert "inside `loss.backward()` itself" in text and "Before the optimizer step it waits" not in text
