"""Tensor parallelism, Megatron style: an MLP whose two Linears are split across ranks so that the whole forward
needs one all_reduce, and the whole backward one more. Lab 24 has the learner build it.

Why column-then-row: the first Linear is split by its output features (rank r keeps rows r of `w1` and of `b1`),
so each rank computes its own slice of the hidden layer, and the elementwise GELU needs nothing from the others.
The second Linear is split by its input features (rank r keeps columns r of `w2`), which is exactly the slice of
the hidden layer the rank holds: each rank computes a partial sum of the output, and one all_reduce adds them.
`b2` is replicated and must be added once, after the sum (a bias added on every rank is counted n times).

The backward is the mirror (Megatron's `f` and `g`): the all_reduce of the output passes its gradient through
unchanged (every rank already holds the whole dL/dy), and the input `x`, used by every rank's slice, gets partial
gradients that one all_reduce adds. `torch.distributed.nn.functional.all_reduce` is autograd-aware but all-reduces
the gradient too (right when each rank's loss is a different term of one total loss; here every rank computes
the same loss from the same y, and every gradient upstream comes out n times too big). Both conventions exist in
the wild: flash-attention's all_reduce passes the gradient through, and Dao-AILab/flash-attention#1244 asks why it
differs from torch's. Torch 2.13 deprecates that function (a FutureWarning on every call); the lab and
`torch_all_reduce_both_ways` call `sandbox.compat.differentiable_all_reduce`, the same thing on every torch.

Here: the model and data (`weights`, `batch`, plain single-process torch), the single-process references the
lab's checks compare with (`reference`, `reference_forward`: the unsplit MLP's values, each rank's gradient
slices), the lab's rule (`rules`: the ranks must all_reduce), the reference solution (`tp_forward`, `tp_mlp`), and
plausible wrong attempts the tests hold the check to. The lab's own first attempts live in its cells, where the
learner edits them; the tests read them from there.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

D, H, BATCH = 8, 16, 4  # model width, hidden width (divisible by 2 and 4 ranks), rows in the batch


def weights() -> dict:
    """The unsplit MLP's parameters, the same on every rank (seeded): w1 (H, D), b1 (H), w2 (D, H), b2 (D)."""
    g = torch.Generator().manual_seed(24)
    return {"w1": torch.randn(H, D, generator=g) / D ** 0.5, "b1": torch.randn(H, generator=g) * 0.1,
            "w2": torch.randn(D, H, generator=g) / H ** 0.5, "b2": torch.randn(D, generator=g)}


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """The input x (BATCH, D) and the regression target (BATCH, D), the same on every rank."""
    g = torch.Generator().manual_seed(25)
    return torch.randn(BATCH, D, generator=g), torch.randn(BATCH, D, generator=g)


def mlp(x, w1, b1, w2, b2):
    """The unsplit MLP: Linear(D -> H), GELU, Linear(H -> D)."""
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)


def loss_fn(y, target):
    return ((y - target) ** 2).mean()


def shard(rank: int, world: int) -> slice:
    """The hidden features rank `rank` owns: rows of w1 and b1, columns of w2."""
    if H % world:
        raise ValueError(f"the hidden width {H} does not split evenly over {world} ranks; use 2 or 4.")
    k = H // world
    return slice(rank * k, (rank + 1) * k)


def setup() -> tuple[int, int]:
    """This rank and the number of ranks. The group is the sandbox's: `lab.check` makes it (and destroys it
    after) when the function it runs does not call init_process_group itself.
    (A process's first backward imports what torch._dynamo imports, seconds of sympy. Because this module names
    torch._dynamo, a run of its own functions has the sandbox import it once before it forks the ranks, which then
    share it; a notebook's warm sandbox imports it between runs.)"""
    import torch.distributed as dist
    return dist.get_rank(), dist.get_world_size()


# ----------------------------------------------------------------------------------------------- references
def reference_forward(n: int) -> dict:
    """What every rank's forward must return: the unsplit MLP's output."""
    x, _ = batch()
    return {"y": mlp(x, **weights())}


def reference(n: int) -> dict:
    """The unsplit MLP, forward and backward in one process; each rank must return the output, the input's
    gradient, its own slices of w1, b1, w2's gradients and the whole (replicated) b2's gradient."""
    p = {k: v.requires_grad_() for k, v in weights().items()}
    x, target = batch()
    x.requires_grad_()
    y = mlp(x, **p)
    loss_fn(y, target).backward()
    per_rank = []
    for r in range(n):
        s = shard(r, n)
        per_rank.append({"y": y.detach(), "grad_x": x.grad, "grad_w1": p["w1"].grad[s], "grad_b1": p["b1"].grad[s],
                         "grad_w2": p["w2"].grad[:, s], "grad_b2": p["b2"].grad})
    return {"per_rank": per_rank}


def b2_count(y: torch.Tensor) -> float:
    """How many times b2 is in an output y of the batch: (y - the unsplit MLP's y without b2) / b2, averaged."""
    w = weights()
    x, _ = batch()
    without = mlp(x, w["w1"], w["b1"], w["w2"], torch.zeros(D))
    return round(((y - without) / w["b2"]).mean().item(), 3)


def matching(res, n: int, rank: int = 0) -> list[str]:
    """The fields of `rank`'s value (y, grad_x, ...) that equal the unsplit MLP's (empty if it did not finish)."""
    got = res.values[rank] if res is not None and res.ok else None
    want = reference(n)["per_rank"][rank]
    return [k for k, v in want.items() if isinstance(got, dict) and isinstance(got.get(k), torch.Tensor)
            and got[k].shape == v.shape and torch.allclose(got[k], v, rtol=1e-5, atol=1e-6)]


def rules(all_reduces: int | None = None) -> list:
    """What the reference cannot tell: the ranks must really share the work (a rank that runs the unsplit MLP
    and returns its slices has the right values and no all_reduce); and, given `all_reduces`, each rank makes no more
    all_reduces than the algorithm needs: 1 for the forward (g's), 2 with the backward (g's and f's). A backward that
    also sums dL/dy (the plain differentiable all_reduce), its gradients then divided by N to match, makes 3."""
    from sandbox import lab
    from sandbox.lab.rules import calls_made
    from sandbox.words import plural

    out = [lab.communicates(op="all_reduce", says="the ranks add their partial outputs with all_reduce")]
    if all_reduces is not None:
        def found(res) -> str | None:
            over = sorted((r, k) for r, k in calls_made(res, frozenset({"all_reduce"})).items() if k > all_reduces)
            return (f"rank {over[0][0]} made {over[0][1]}: an all_reduce the algorithm does not need (its values were"
                    f" then patched to match)") if over else None

        what = "g's in the forward" if all_reduces == 1 else "g's in the forward and f's in the backward"
        out.append(lab.Rule(says=f"each rank makes {plural(all_reduces, 'all_reduce')} ({what}), no more",
                            found=found))
    return out


SIZES = (2, 4, 8)  # the world sizes lab 24's checks run on (the 16 hidden features split evenly on each)


def check(fn, part: str, n: tuple[int, ...] = SIZES, **options):
    """Lab 24's check of a learner's `my_forward` (part "forward") or `my_mlp` ("mlp"): `lab.check` on each size
    of `n` against the unsplit MLP, with `rules` (the all_reduces the part needs, no more) and what only the run
    can show: each rank runs its own share of the matrix products (`share`), and in the mlp the sum of dL/dx runs
    inside backward (`inside`). `fn` runs as it is, measured (`sandbox.course.work.measured`)."""
    from sandbox import lab
    from sandbox.course.work import measured
    from sandbox.lab.checks import inits_itself

    if part not in ("forward", "mlp"):
        raise ValueError(f"part is 'forward' or 'mlp', not {part!r}.")
    options.setdefault("init", not inits_itself(fn))
    ref, calls = (reference_forward, 1) if part == "forward" else (reference, 2)
    more = [share(part)] + ([inside()] if part == "mlp" else [])
    return lab.check(measured, n=n, args=(fn,), reference=lambda k, _fn: ref(k), rules=rules(all_reduces=calls) + more,
                     **options)


def unsplit_flops(part: str) -> int:
    """The FLOPs of the unsplit MLP's matrix products in one process: its forward, or its forward and backward
    (the gradients of x and of every weight), as torch's FLOP counter counts them."""
    from sandbox.course.work import single_process_flops

    if part == "forward":
        x, _ = batch()
        return single_process_flops(mlp, x, **weights())
    return single_process_flops(reference, 1)


def share(part: str):
    """The rule that each rank runs 1/N of the unsplit MLP's matrix products (within 10%): its own slices."""
    from sandbox import lab
    from sandbox.course.work import flops

    def found(res) -> str | None:
        n, total = len(res.ranks), unsplit_flops(part)
        off = sorted((r, f) for r, f in flops(res).items() if abs(f - total / n) > 0.1 * total / n)
        if not off:
            return None
        r, f = off[0]
        return (f"rank {r} ran {f} FLOPs of matrix products; its share of the unsplit MLP's {total} on {n} ranks is"
                f" {total // n}: each rank computes with its own slices, no more, no less")

    return lab.Rule(says="each rank runs 1/N of the MLP's matrix products (torch's FLOP counter), with its own"
                         " slices", found=found)


def inside():
    """The rule that the sum of dL/dx (f's backward) runs inside backward, as autograd's: on every rank, an
    all_reduce starts while its backward runs."""
    from sandbox import lab, words
    from sandbox.course.work import backward_spans, during

    def found(res) -> str | None:
        ran = backward_spans(res)
        late = sorted(r for r, k in during(res, "all_reduce").items() if k == 0 and r in ran)
        return (f"{words.ranks(late)} made no all_reduce while backward ran: dL/dx was summed after backward"
                " returned, too late for any layer before the MLP, which gets its gradient during backward"
                ) if late else None

    return lab.Rule(says="the sum of dL/dx (f's backward) runs inside backward", found=found)


def _my_slices(rank: int, world: int) -> dict:
    """This rank's parameters as leaves: its slices of w1, b1, w2, and the whole b2."""
    w, s = weights(), shard(rank, world)
    return {"w1": w["w1"][s].clone().requires_grad_(), "b1": w["b1"][s].clone().requires_grad_(),
            "w2": w["w2"][:, s].clone().requires_grad_(), "b2": w["b2"].clone().requires_grad_()}


def _grads(y, x, p) -> dict:
    return {"y": y.detach(), "grad_x": x.grad, "grad_w1": p["w1"].grad, "grad_b1": p["b1"].grad,
            "grad_w2": p["w2"].grad, "grad_b2": p["b2"].grad}


# ----------------------------------------------------------------------------------------------- the solution
class CopyToTP(torch.autograd.Function):
    """Megatron's f, in front of the split: forward, the input as it is (every rank has all of it); backward,
    the sum of every rank's partial gradient of that input."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        import torch.distributed as dist
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class ReduceFromTP(torch.autograd.Function):
    """Megatron's g, after the split: forward, the sum of every rank's partial output; backward, the gradient
    as it is (every rank computes the same loss from the same sum, so each already holds all of dL/dy)."""

    @staticmethod
    def forward(ctx, partial):
        import torch.distributed as dist
        total = partial.clone()
        dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx, grad):
        return grad


def tp_forward() -> dict:
    """The reference solution of the forward: column-split Linear, GELU, row-split Linear, one all_reduce, b2 once."""
    rank, world = setup()
    p = _my_slices(rank, world)
    x, _ = batch()
    hidden = F.gelu(F.linear(x, p["w1"], p["b1"]))  # (BATCH, H/world): this rank's hidden features
    y = ReduceFromTP.apply(F.linear(hidden, p["w2"])) + p["b2"]  # partial sums added, then the bias once
    return {"y": y.detach()}


def tp_mlp() -> dict:
    """The reference solution: forward and backward, one all_reduce each (g's forward, f's backward)."""
    rank, world = setup()
    p = _my_slices(rank, world)
    x, target = batch()
    x.requires_grad_()
    hidden = F.gelu(F.linear(CopyToTP.apply(x), p["w1"], p["b1"]))
    y = ReduceFromTP.apply(F.linear(hidden, p["w2"])) + p["b2"]
    loss_fn(y, target).backward()
    return _grads(y, x, p)


# ----------------------------------------------------------------------------------------------- wrong attempts
def forward_without_all_reduce() -> dict:
    """Each rank keeps its partial output: no communication at all."""
    rank, world = setup()
    p = _my_slices(rank, world)
    x, _ = batch()
    return {"y": (F.linear(F.gelu(F.linear(x, p["w1"], p["b1"])), p["w2"]) + p["b2"]).detach()}


def torch_all_reduce_both_ways() -> dict:
    """torch.distributed.nn.functional.all_reduce: right forward, but its backward all-reduces dL/dy too."""
    from sandbox.compat import differentiable_all_reduce as all_reduce
    rank, world = setup()
    p = _my_slices(rank, world)
    x, target = batch()
    x.requires_grad_()
    hidden = F.gelu(F.linear(CopyToTP.apply(x), p["w1"], p["b1"]))
    y = all_reduce(F.linear(hidden, p["w2"])) + p["b2"]
    loss_fn(y, target).backward()
    return _grads(y, x, p)


def no_input_grad_reduce() -> dict:
    """The forward's all_reduce done right, the backward's forgotten: x.grad is this rank's share only."""
    rank, world = setup()
    p = _my_slices(rank, world)
    x, target = batch()
    x.requires_grad_()
    hidden = F.gelu(F.linear(x, p["w1"], p["b1"]))
    y = ReduceFromTP.apply(F.linear(hidden, p["w2"])) + p["b2"]
    loss_fn(y, target).backward()
    return _grads(y, x, p)


def unsplit_on_every_rank() -> dict:
    """The shortcut: every rank runs the whole MLP and returns its slices of the gradients. Right values, no
    communication: the rule of the lab (`rules`) rejects it."""
    rank, world = setup()
    p = {k: v.requires_grad_() for k, v in weights().items()}
    x, target = batch()
    x.requires_grad_()
    y = mlp(x, **p)
    loss_fn(y, target).backward()
    s = shard(rank, world)
    return {"y": y.detach(), "grad_x": x.grad, "grad_w1": p["w1"].grad[s], "grad_b1": p["b1"].grad[s],
            "grad_w2": p["w2"].grad[:, s], "grad_b2": p["b2"].grad}
