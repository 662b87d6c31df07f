"""Labs 24 (tensor parallelism) and 25 (pipeline parallelism): each check accepts the reference solution, rejects
the code the lab gives the learner to start from (read from the notebook itself, so the test holds the lab's own
cell, not a copy of it), and rejects other plausible wrong attempts: the right values without communication, a
forgotten backward all_reduce, gradients N times too big, a stage that never sends its gradient back, a GPipe
handed in as 1F1B. Every run is real: gloo ranks under the sandbox.

The bubble's arithmetic is tested on events written by hand (a timing on a loaded machine decides nothing here);
the runs' part is the order of each stage's calls, which the schedule fixes.
"""
import ast
import os

import pytest
from conftest import ROOT

from sandbox import lab
from sandbox.course import pipeline as pp
from sandbox.course import tensor_parallel as tp
from sandbox.result import Diagnosis, RankResult, RunResult

nbformat = pytest.importorskip("nbformat", reason="needs the optional package nbformat (pip install -e '.[dev]')")


def _from_lab(notebook: str, name: str):
    """The function `name` as the lab's own cell defines it, defined here (sent to the ranks by value)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from sandbox.compat import differentiable_all_reduce

    nb = nbformat.read(os.path.join(ROOT, "labs", notebook), as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.source.lstrip().startswith("%"):
            continue
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                # no __name__: the function has no module, so the sandbox sends it by value, as from a notebook
                scope = {"torch": torch, "dist": dist, "F": F, "tp": tp, "pp": pp,
                         "differentiable_all_reduce": differentiable_all_reduce}
                exec(compile(ast.Module(body=[node], type_ignores=[]), notebook, "exec"), scope)
                return scope[name]
    raise AssertionError(f"{notebook} defines no function {name}")


def _tp(fn, n=2, forward=False, **kw):
    return lab.check(fn, n=n, reference=tp.reference_forward if forward else tp.reference, rules=tp.rules(),
                     show=False, **kw)


def _pp(fn, m, rules=(), **kw):
    return lab.check(fn, n=4, kwargs={"m": m}, reference=pp.reference, rules=rules, show=False, **kw)


# ----------------------------------------------------------------------------------------------- tensor parallel
def test_tp_reference_solution_passes_on_2_and_4_ranks(clean):
    for n in (2, 4):
        c = _tp(tp.tp_mlp, n=n)
        assert c.ok and c.verdict == "right", c
    c = _tp(tp.tp_forward, forward=True)
    assert c.ok, c


def test_tp_labs_first_forward_counts_the_bias_twice(clean):
    """Lab 24's starting forward: every rank adds b2 before the all_reduce."""
    c = _tp(_from_lab("24_tensor_parallel.ipynb", "my_forward"), forward=True)
    assert not c.ok and c.verdict == "wrong", c
    assert "['y']" in c.message, c.message
    assert tp.b2_count(c.result.values[0]["y"]) == 2.0


def test_tp_labs_starting_mlp_gets_the_gradients_wrong(clean):
    """Lab 24's starting MLP: torch.distributed.nn.functional.all_reduce sums dL/dy too; x's gradient unsummed."""
    c = _tp(_from_lab("24_tensor_parallel.ipynb", "my_mlp"))
    assert not c.ok and c.verdict == "wrong", c
    assert tp.matching(c.result, 2) == ["y", "grad_b2"]


@pytest.mark.parametrize("attempt, forward, wrong_field", [
    (tp.forward_without_all_reduce, True, "y"),     # each rank keeps its partial sum: the rule sees no all_reduce
    (tp.torch_all_reduce_both_ways, False, "grad_x"),  # every gradient upstream of the sum 2x on 2 ranks
    (tp.no_input_grad_reduce, False, "grad_x"),     # x's gradient is this rank's share only
])
def test_tp_check_rejects_a_wrong_split(attempt, forward, wrong_field, clean):
    c = _tp(attempt, forward=forward)
    assert not c.ok and c.verdict == "wrong", c
    assert f"['{wrong_field}']" in c.message, c.message


def test_tp_check_rejects_the_unsplit_shortcut(clean):
    """The whole MLP on every rank returns the right values; the lab's rule wants the all_reduce."""
    c = _tp(tp.unsplit_on_every_rank)
    assert not c.ok and c.verdict == "rule", c
    assert "all_reduce" in c.message, c.message


def test_tp_check_measures_each_rank_s_share_and_the_backward_s_sum(clean):
    """`tp.check`, as lab 24 calls it: the reference passes on 2, 4 and 8 ranks, each rank's matrix products
    counted by torch's FLOP counter are 1/N of the unsplit MLP's, and one all_reduce (f's) starts inside each
    rank's backward; the lab's starting cells still fail on their values."""
    from sandbox.course.work import backward_spans, during, flops

    c = tp.check(tp.tp_mlp, "mlp", n=(4,), show=False)
    assert c.ok and c.verdict == "right", c
    total = tp.unsplit_flops("mlp")
    assert total > 0 and flops(c.result) == {r: total // 4 for r in range(4)}
    assert set(backward_spans(c.result)) == {0, 1, 2, 3}
    assert during(c.result, "all_reduce") == {0: 1, 1: 1, 2: 1, 3: 1}
    f = tp.check(tp.tp_forward, "forward", show=False)
    assert f.ok, f
    assert flops(f.result) == {0: tp.unsplit_flops("forward") // 2, 1: tp.unsplit_flops("forward") // 2}
    first = tp.check(_from_lab("24_tensor_parallel.ipynb", "my_forward"), "forward", show=False)
    assert not first.ok and first.verdict == "wrong", first


def _plain_all_reduce_mlp():
    """The forward fixed as section 1 teaches (a plain dist.all_reduce, then b2), run through backward as it is."""
    import warnings

    import torch.distributed as dist
    import torch.nn.functional as F

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        rank, world = tp.setup()
        w, s = tp.weights(), tp.shard(rank, world)
        w1, b1 = w["w1"][s].requires_grad_(), w["b1"][s].requires_grad_()
        w2, b2 = w["w2"][:, s].requires_grad_(), w["b2"].requires_grad_()
        x, target = tp.batch()
        x.requires_grad_()
        y = F.linear(F.gelu(F.linear(x, w1, b1)), w2)
        dist.all_reduce(y)
        y = y + b2
        tp.loss_fn(y, target).backward()
    return {"y": y.detach(), "grad_x": x.grad, "grad_w1": w1.grad, "grad_b1": b1.grad, "grad_w2": w2.grad,
            "grad_b2": b2.grad, "warned": [str(m.message) for m in seen]}


def test_tp_a_plain_all_reduce_passes_the_gradient_through_as_lab_24_says(clean):
    """Lab 24's section 3: a plain dist.all_reduce has no backward of its own; autograd passes dL/dy through it
    (g's backward, by luck), torch warns that no autograd kernel is registered, and only grad_x is wrong."""
    c = _tp(_plain_all_reduce_mlp)
    assert not c.ok and c.verdict == "wrong", c
    assert tp.matching(c.result, 2) == ["y", "grad_w1", "grad_b1", "grad_w2", "grad_b2"]
    warned = " ".join(c.result.values[0]["warned"])
    assert "c10d::allreduce_: an autograd kernel was not registered to the Autograd key(s)" in warned, warned
    nb = nbformat.read(os.path.join(ROOT, "labs", "24_tensor_parallel.ipynb"), as_version=4)
    text = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "invisible to autograd" not in text
    assert "c10d::allreduce_: an autograd kernel was not registered to the" in text


# ----------------------------------------------------------------------------------------------- pipeline
def test_pp_reference_schedules_pass_and_hold_what_they_should(clean):
    g = _pp(pp.gpipe, 8)
    assert g.ok, g
    assert pp.held(g.result) == {0: 8, 1: 8, 2: 8, 3: 8}
    f = _pp(pp.one_f_one_b, 8, rules=[pp.in_flight("1f1b", 8)])
    assert f.ok and f.verdict == "right", f
    assert pp.held(f.result) == {0: 4, 1: 3, 2: 2, 3: 1}
    over_time = pp.held_over_time(f.result)  # held from each forward's start to its backward's end: back to 0
    assert {r: max(k for _, k in steps) for r, steps in over_time.items()} == pp.held(f.result)
    assert all(steps[-1][1] == 0 and len(steps) == 16 for steps in over_time.values()), over_time
    assert pp.held_png({"GPipe": g.result, "1F1B": f.result}).startswith(b"\x89PNG")
    assert set(pp.bubble(f.result)) == {0, 1, 2, 3} and all(0 < v < 1 for v in pp.bubble(f.result).values())


def test_pp_labs_gpipe_without_the_gradient_send_hangs(clean):
    c = _pp(_from_lab("25_pipeline.ipynb", "my_gpipe"), 4)
    assert not c.ok and c.verdict == "hang", c
    d = c.result.diagnosis  # ranks 0-2 each wait in a recv from the next; rank 3, the end of the chain, never sends
    assert (d.kind, d.culprit_ranks) == ("p2p_unmatched", [2, 3]), c.message


def test_pp_labs_blocking_1f1b_is_a_send_cycle(clean):
    """Lab 25's first 1F1B: ranks 2 and 3 each block in a send to the other. As an exercise would ask it, too."""
    blocking = _from_lab("25_pipeline.ipynb", "my_1f1b")
    c = _pp(blocking, 8, rules=[pp.in_flight("1f1b", 8)])
    assert not c.ok and c.verdict == "hang", c
    assert c.result.diagnosis.kind == "p2p_cycle" and sorted(c.result.diagnosis.culprit_ranks) == [2, 3], c.message
    asked = _pp(blocking, 8, expect="hang", kind="p2p_cycle", culprits=[2, 3])
    assert asked.ok, asked


def test_pp_check_rejects_gpipe_handed_in_as_1f1b(clean):
    c = _pp(pp.gpipe, 8, rules=[pp.in_flight("1f1b", 8)])
    assert not c.ok and c.verdict == "rule", c
    assert "stage 0 held the activations of 8 micro-batches" in c.message, c.message


def _gpipe_no_input_grad(m: int = 4) -> dict:
    """GPipe that sends back a gradient of zeros: the received activation was never made to want a gradient."""
    import torch
    import torch.distributed as dist
    rank, world, p = pp.start()
    data = pp.micro_batches(m)
    first, last = rank == 0, rank == world - 1
    stash = []
    for i in range(m):
        x = data[i][0] if first else torch.empty_like(data[i][0])
        if not first:
            dist.recv(x, src=rank - 1)
        y = pp.forward(p, x)
        if last:
            y = pp.loss_of(y, data[i][1], m)
        else:
            dist.send(y.detach(), dst=rank + 1)
        stash.append((x, y))
    for x, y in reversed(stash):
        if last:
            pp.backward(y)
        else:
            grad = torch.empty_like(y)
            dist.recv(grad, src=rank + 1)
            pp.backward(y, grad)
        if not first:
            dist.send(torch.zeros_like(x) if x.grad is None else x.grad, dst=rank - 1)
    return pp.finish(p)


def _gpipe_for_four_stages(m: int = 4) -> dict:
    """The reference GPipe with the last stage written in as rank 3: right on the lab's 4 stages only."""
    import torch
    import torch.distributed as dist
    rank, world, p = pp.start()
    data = pp.micro_batches(m)
    first, last = rank == 0, rank == 3
    stash = []
    for i in range(m):
        x = data[i][0] if first else torch.empty_like(data[i][0])
        if not first:
            dist.recv(x, src=rank - 1)
            x.requires_grad_()
        y = pp.forward(p, x)
        y = pp.loss_of(y, data[i][1], m) if last else y
        if not last:
            dist.send(y.detach(), dst=rank + 1)
        stash.append((x, y))
    for x, y in reversed(stash):
        if last:
            pp.backward(y)
        else:
            grad = torch.empty_like(y)
            dist.recv(grad, src=rank + 1)
            pp.backward(y, grad)
        if not first:
            dist.send(x.grad, dst=rank - 1)
    return pp.finish(p)


def test_pp_check_runs_an_odd_number_of_stages_too(clean):
    c = pp.check(_gpipe_for_four_stages, "gpipe", show=False)
    assert not c.ok and c.message.startswith("On 3 stages with m = 2: "), c
    right = pp.check(pp.gpipe, "gpipe", show=False)
    assert right.ok and right.message.endswith("and the same on 4 stages with m = 2 and on 3 stages with m = 2."), right


@pytest.mark.parametrize("attempt", [_gpipe_no_input_grad, "last_stage_in_order"])
def test_pp_check_rejects_wrong_gradients(attempt, clean):
    """Zeros sent back as gradients; the last stage's backward in another order than its neighbour's (lab 25's
    exercise): every call matches, only the reference comparison tells."""
    fn = _from_lab("25_pipeline.ipynb", attempt) if isinstance(attempt, str) else attempt
    c = _pp(fn, 4)
    assert not c.ok and c.verdict == "wrong", c


def _run(events_by_rank):
    events = [dict(e, rank=r) for r, evs in events_by_rank.items() for e in evs]
    return RunResult(verdict="ok", world_size=len(events_by_rank), wall_s=1.0,
                     diagnosis=Diagnosis(kind="none", cause=""),
                     ranks=[RankResult(rank=r, outcome="ok") for r in events_by_rank], events=events)


def _call(i, op, t0, t1, **fields):
    return [{"ev": "enter", "id": i, "op": op, "t": t0, **fields}, {"ev": "exit", "id": i, "op": op, "t": t1}]


def test_bubble_is_time_in_calls_between_the_barriers():
    """Rank 0: 0.5 s in a recv and 0.1 s in the last barrier, of a 1 s window; the init before the first
    barrier does not count. Rank 1: never waits but in the barrier (0.2 s)."""
    res = _run({
        0: _call(1, "init_process_group", -5, -1) + _call(2, "barrier", -1, 0.0)
        + _call(3, "recv", 0.1, 0.6, peer=1) + _call(4, "barrier", 0.9, 1.0),
        1: _call(1, "barrier", -0.5, 0.0) + _call(2, "send", 0.2, 0.2, peer=0) + _call(3, "barrier", 0.8, 1.0),
    })
    assert pp.bubble(res) == pytest.approx({0: 0.6, 1: 0.2})
    assert pp.bubble_formula(4, 4) == pytest.approx(3 / 7)
    assert "idle per rank 0.60 0.20 (mean 0.40)" in pp.bubble_line("GPipe", res, 4)


@pytest.mark.parametrize("guess, word", [(0.25, "wrong"), (0.6, "wrong"), (0.43, "right"), (3 / 7, "right"),
                                         (0.40, "wrong")])
def test_a_guess_of_the_bubble_is_graded_against_the_formula_not_the_run(guess, word):
    """The lab asks for the bubble with equal steps and free messages: (p-1)/(m+p-1), 0.43 for p = m = 4. The
    run's own bubble (0.40 on average here) is not the answer, and a line that shows a guess says whether it is
    right (the lab once printed a check's 'right: True' beside any guess)."""
    res = _run({
        0: _call(1, "barrier", -1, 0.0) + _call(2, "recv", 0.1, 0.6, peer=1) + _call(3, "barrier", 0.9, 1.0),
        1: _call(1, "barrier", -0.5, 0.0) + _call(2, "send", 0.2, 0.2, peer=0) + _call(3, "barrier", 0.8, 1.0),
        2: _call(1, "barrier", -0.5, 0.0) + _call(2, "barrier", 0.6, 1.0),
        3: _call(1, "barrier", -0.5, 0.0) + _call(2, "barrier", 0.6, 1.0),
    })
    line = pp.bubble_line("GPipe", res, 4, guess)
    assert line.endswith(f"you said {guess:.2f}: {word}"), line


def test_bubble_needs_the_two_barriers():
    res = _run({0: _call(1, "recv", 0, 1, peer=1), 1: _call(1, "send", 0, 1, peer=0)})
    with pytest.raises(ValueError, match="rank 0 made 0 barrier calls"):
        pp.bubble(res)


def test_held_counts_a_batch_send_and_a_prefetched_recv():
    """Stage 1 of 2 posts two recvs from stage 0 in one batch before sending either gradient back: 2 held."""
    res = _run({
        0: _call(1, "send", 0, 0, peer=1) + _call(2, "send", 0, 0, peer=1) + _call(3, "recv", 0, 0, peer=1),
        1: _call(1, "batch_isend_irecv", 0, 0, p2p=[{"op": "irecv", "peer": 0}, {"op": "irecv", "peer": 0}])
        + _call(2, "send", 0, 0, peer=0) + _call(3, "send", 0, 0, peer=0),
    })
    assert pp.held(res) == {0: 2, 1: 2}
    assert pp.holding(res) == {0: (2, False), 1: (2, False)}  # read from the calls' order: one may be posted ahead
    assert pp.in_flight("1f1b", 2).found(res) is None  # stage 1 may hold 1, plus 1 posted ahead
