"""Lab 23, sharding built by hand: data parallelism where no rank holds everything. Plain data parallelism keeps a
full copy of the parameters, the gradients and Adam's two moments on every rank (4 numbers per parameter); the ZeRO
paper's point is that each rank only needs to *update* 1/N of them.

- ZeRO-1/2 (`zero`): the parameters live in one flat vector, padded so that it splits into N equal shards. After
  backward, `reduce_scatter` gives each rank the summed gradient of its own shard only; the rank steps its shard with
  Adam (whose moments exist for that shard alone), and `all_gather` puts the updated shards back together on every
  rank. Stage 1 shards the optimizer state; stage 2 also drops the full gradient once it is reduce-scattered.
- FSDP (ZeRO-3, `fsdp`): the parameters themselves are sharded, layer by layer. `GatheredLinear` all_gathers a
  layer's parameters just before its forward and lets them go right after; its backward gathers them again, and
  reduce-scatters the layer's gradient so each rank keeps only its shard's. What a rank holds between steps is 1/N
  of everything, plus, while a layer runs, that one layer in full.

Why padding: a reduce-scatter splits its input into N equal parts, and an all-gather joins N equal parts. A learner
who splits the flat vector with `tensor_split` gets parts of 117, 117, 117 and 116 numbers for this model's 467
parameters on 4 ranks, and gloo refuses the first reduce-scatter on every rank
(`outputShape[0] * worldSize == inputShape[0] (468 vs. 467)`; rank 3's says 464): `zero_unpadded`, the lab's bug.
The tensor forms are `compat.reduce_scatter_single` and `compat.all_gather_single`: torch 2.13 renamed them (see
`sandbox.compat`), and the trace names whichever this torch has.
Padding the vector with zeros to a multiple of N fixes it; the padding's gradient is zero and it never reaches the
model.

`memory(...)` counts what a rank holds, from the tensors themselves: the bytes of the distinct storages behind the
parameters, the gradients and the optimizer's state (a view into a flat buffer counts the buffer once).
"""
from __future__ import annotations

import weakref

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from sandbox import compat, lab, words
from sandbox.course.holding import PEAK, kept_for_backward, memory, memory_table, nbytes  # noqa: F401  (sh.memory_table)
from sandbox.course.data_parallel import setup, weights  # noqa: F401  (the lab calls sh.setup() too)

STEPS = 3
LR = 0.01
BATCH = 24  # divisible by 2, 3 and 4 ranks
SIZES = (8, 16, 16, 3)  # three Linear layers: 467 parameters, which 2, 3 and 4 do not divide


def make_model() -> nn.Sequential:
    torch.manual_seed(0)  # every rank builds the same initial weights
    layers: list[nn.Module] = []
    for a, b in zip(SIZES, SIZES[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers[:-1])  # no Tanh after the last layer


def batch(step: int):
    g = torch.Generator().manual_seed(2000 + step)
    return torch.randn(BATCH, SIZES[0], generator=g), torch.randn(BATCH, SIZES[-1], generator=g)


def local(step: int, rank: int, world: int):
    per = BATCH // world
    return tuple(t[rank * per:(rank + 1) * per] for t in batch(step))


def loss_fn(out, y):
    return nn.functional.mse_loss(out, y)


def reference(n: int = 1, steps: int = STEPS) -> dict:
    """One process, the whole batch, Adam: what every rank's weights must equal after `steps` steps."""
    model = make_model()
    adam = torch.optim.Adam(model.parameters(), lr=LR)
    for step in range(steps):
        x, y = batch(step)
        adam.zero_grad()
        loss_fn(model(x), y).backward()
        adam.step()
    return weights(model)


# ------------------------------------------------------------------------------------- part 1: ZeRO-1/2
def zero(steps: int = STEPS, stage: int = 2, measure: bool = False):
    rank, world = setup()
    model = make_model()
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    size = -(-total // world)  # FIX: ceil: the flat vector is padded with zeros to size * world, N equal shards
    flat = torch.zeros(size * world)
    flat[:total] = parameters_to_vector(params).detach()
    start = 0
    for p in params:  # the model's parameters become views into flat: one all_gather updates them all
        p.data = flat[start:start + p.numel()].view_as(p)
        start += p.numel()
    shard = nn.Parameter(flat[rank * size:(rank + 1) * size])  # a view too: Adam steps this rank's part of flat
    adam = torch.optim.Adam([shard], lr=LR)  # its moments exist for the shard only
    peak = 0  # the gradients' bytes at their fullest, within a step
    for step in range(steps):
        x, y = local(step, rank, world)
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        grads = torch.zeros(size * world)  # padded like flat
        grads[:total] = torch.cat([p.grad.reshape(-1) for p in params])
        peak = max(peak, nbytes([p.grad for p in params] + [grads]))  # backward's whole gradient, and its copy
        model.zero_grad(set_to_none=True)  # the gradient lives in grads now
        mine = torch.empty(size)
        compat.reduce_scatter_single(mine, grads)  # the sum over ranks of this rank's part
        if stage == 1:  # ZeRO-1 keeps the whole gradient; ZeRO-2 lets grads go and keeps only its part
            mine = grads[rank * size:(rank + 1) * size].copy_(mine)
        shard.grad = mine.div_(world)
        adam.step()
        compat.all_gather_single(flat, shard.detach().clone())  # every rank's stepped part, into every rank
    if measure:
        return memory(params + [shard], adam), peak
    return weights(model)


def zero_unpadded(steps: int = STEPS) -> dict:
    rank, world = setup()
    model = make_model()
    params = list(model.parameters())
    flat = parameters_to_vector(params).detach()
    shard = nn.Parameter(flat.tensor_split(world)[rank].clone())  # this rank's part of the parameters
    adam = torch.optim.Adam([shard], lr=LR)
    for step in range(steps):
        x, y = local(step, rank, world)
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        grads = torch.cat([p.grad.reshape(-1) for p in params])
        mine = torch.empty_like(shard)
        compat.reduce_scatter_single(mine, grads)  # the sum over ranks of this rank's part
        shard.grad = mine / world
        adam.step()
        compat.all_gather_single(flat, shard.detach())  # every rank's stepped part
        vector_to_parameters(flat, params)
    return weights(model)


def gather_first(steps: int = STEPS) -> dict:
    """Wrong: the shards are gathered before Adam steps them, so the model always runs one step behind."""
    rank, world = setup()
    model = make_model()
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    size = -(-total // world)
    flat = torch.zeros(size * world)
    flat[:total] = parameters_to_vector(params).detach()
    shard = nn.Parameter(flat[rank * size:(rank + 1) * size].clone())
    adam = torch.optim.Adam([shard], lr=LR)
    for step in range(steps):
        x, y = local(step, rank, world)
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        grads = torch.zeros(size * world)
        grads[:total] = torch.cat([p.grad.reshape(-1) for p in params])
        mine = torch.empty(size)
        compat.reduce_scatter_single(mine, grads)
        compat.all_gather_single(flat, shard.detach().clone())
        vector_to_parameters(flat[:total], params)
        shard.grad = mine / world
        adam.step()
    return weights(model)


# ------------------------------------------------------------------------------------- part 2: FSDP
class GatheredLinear(torch.autograd.Function):
    """y = x W^T + b, where W and b exist in full only inside this forward and this backward."""

    @staticmethod
    def forward(ctx, x, shard, layer):
        w, b = layer.gather()  # every rank's shard of this layer, joined
        ctx.save_for_backward(x)  # not w: the full parameters go when forward returns
        ctx.layer = layer
        return x @ w.T + b

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        layer = ctx.layer
        w, _ = layer.gather()  # FIX: gathered again, for this backward only
        grad = torch.cat([(gy.T @ x).reshape(-1), gy.sum(0)])  # dL/dW, dL/db, flat
        mine = torch.empty_like(layer.shard)
        compat.reduce_scatter_single(mine, layer.padded(grad))  # FIX: the sum over ranks of this rank's shard
        return gy @ w, mine / dist.get_world_size(), None


class ShardedLinear(nn.Module):
    """A Linear layer of which this rank keeps one shard of the flat (weight, bias), padded to N equal shards."""

    def __init__(self, linear: nn.Linear, function=GatheredLinear):
        super().__init__()
        rank, self.world = setup()
        self.out_features, self.in_features = linear.weight.shape
        self.numel = linear.weight.numel() + linear.bias.numel()
        self.size = -(-self.numel // self.world)
        flat = self.padded(torch.cat([linear.weight.detach().reshape(-1), linear.bias.detach()]))
        self.shard = nn.Parameter(flat[rank * self.size:(rank + 1) * self.size].clone())
        self.function = function
        self.index = None  # its place in the model, and what `fsdp` is running: "forward" or "backward"
        self.phase = None
        self.forward_copy = None  # a weak reference to the full parameters gathered for this step's forward

    def padded(self, v):
        return nn.functional.pad(v, (0, self.size * self.world - v.numel()))

    def gather(self):
        """(weight, bias) in full, from every rank's shard: an all_gather."""
        flat = torch.empty(self.size * self.world)
        compat.all_gather_single(flat, self.shard.detach())
        if self.phase == "forward":
            self.forward_copy = weakref.ref(flat)  # the weight and bias are views of it: it lives while they do
        w = flat[:self.out_features * self.in_features].view(self.out_features, self.in_features)
        return w, flat[self.out_features * self.in_features:self.numel]

    def forward(self, x):
        return self.function.apply(x, self.shard, self)


def fsdp(function=GatheredLinear, steps: int = STEPS, measure: bool = False):
    """Train the model with every Linear sharded (its forward and backward are `function`'s); return the full
    weights, gathered once at the end, by the reference's names (or what a rank held, with `measure`)."""
    rank, world = setup()
    model = make_model()
    for i, m in enumerate(model):
        if isinstance(m, nn.Linear):
            model[i] = ShardedLinear(m, function)
            model[i].index = i
    layers = [m for m in model if isinstance(m, ShardedLinear)]

    def now(phase):
        for m in layers:
            m.phase, m.forward_copy = phase, None if phase == "forward" else m.forward_copy
    adam = torch.optim.Adam(model.parameters(), lr=LR)
    for step in range(steps):
        x, y = local(step, rank, world)
        adam.zero_grad(set_to_none=False)  # keep the grad shards: they are what a rank holds between steps
        now("forward")
        loss = loss_fn(model(x), y)
        now("backward")
        for i in sorted(kept_for_backward(loss, layers)):
            lab.note(fsdp_kept=i)
        loss.backward()
        now(None)
        adam.step()
    if measure:
        return memory(list(model.parameters()), adam)
    out = {}
    for i, m in enumerate(model):
        if isinstance(m, ShardedLinear):
            w, b = m.gather()
            out[f"{i}.weight"], out[f"{i}.bias"] = w.reshape(-1).tolist(), b.tolist()
    return out


class KeptLinear(GatheredLinear):
    """Right values, the rule broken: the forward keeps the full parameters for backward instead of freeing them."""

    @staticmethod
    def forward(ctx, x, shard, layer):
        w, b = layer.gather()
        ctx.save_for_backward(x, w)
        ctx.layer = layer
        return x @ w.T + b

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        layer = ctx.layer
        grad = torch.cat([(gy.T @ x).reshape(-1), gy.sum(0)])
        mine = torch.empty_like(layer.shard)
        compat.reduce_scatter_single(mine, layer.padded(grad))
        return gy @ w, mine / dist.get_world_size(), None


SCATTERS = lab.communicates(op=("reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single"),
                            min_calls=STEPS,
                            says="each rank receives the summed gradient of its own part only (a reduce_scatter)")
PARAMS = sum(a * b + b for a, b in zip(SIZES, SIZES[1:]))  # 467: the model's parameters, in all


def _state_of_a_part(res) -> str | None:
    """Each rank's optimizer, at every step the tracer saw (`optim` events), steps at most ceil(PARAMS / N)
    parameters: its own part, and so holds the state (Adam: two numbers a parameter) of that part only."""
    part = -(-PARAMS // res.world_size)
    for r in range(res.world_size):
        steps = [e for e in res.events if e.get("rank") == r and e.get("ev") == "optim"]
        if not steps:
            return (f"rank {r} made no torch.optim step the check could see: step this rank's part with"
                    f" torch.optim.Adam, as the lab does")
        most = max(steps, key=lambda e: e.get("params", 0))
        if most.get("params", 0) > part:
            return (f"rank {r}'s {most.get('op')} at {most.get('site')} steps {most['params']} parameters and holds"
                    f" {most.get('state')} numbers of state for them, where ZeRO's optimizer steps only the rank's own"
                    f" part: at most {part} of the {PARAMS} on {words.plural(res.world_size, 'rank')}")
    return None


STATE = lab.Rule(says="each rank's optimizer steps its own part of the parameters only, and holds the state of that"
                      " part only (1/N of the optimizer state)", found=_state_of_a_part)
LAYERS = len(SIZES) - 1


def _forward_copies_kept(res) -> str | None:
    """`fsdp` notes a layer whose full parameters, gathered for its forward, the autograd graph holds when the
    backward begins (`kept_for_backward`): a correct forward saves its input and lets the full copy go."""
    for r, said in sorted(lab.notes(res).items()):
        kept = sorted({n["fsdp_kept"] for n in said if "fsdp_kept" in n})
        if kept:
            return (f"on rank {r}, layer{'s' if len(kept) > 1 else ''} {words.listed([str(i) for i in kept])}"
                    f" kept the full parameters gathered for the forward for the backward: FSDP lets the"
                    f" forward's copy go and gathers the layer again for its backward, so that a rank holds one"
                    f" layer in full at a time")
    return None


FREES = lab.Rule(says="the full parameters a layer gathers for its forward are let go, not kept for its backward",
                 found=_forward_copies_kept)
# every layer gathered for its forward and again for its backward, each step (the final gather comes on top)
REGATHER = lab.communicates(op=("all_gather", "all_gather_into_tensor", "all_gather_single"),
                            min_calls=2 * LAYERS * STEPS,
                            says="a layer's full parameters are gathered for its forward, freed, and gathered again"
                                 " for its backward")


# ------------------------------------------------------------------------------------- memory
def unsharded(steps: int = STEPS) -> dict:
    """Plain data parallelism with Adam (every rank holds everything): what a rank holds after `steps` steps."""
    rank, world = setup()
    model = make_model()
    adam = torch.optim.Adam(model.parameters(), lr=LR)
    for step in range(steps):
        x, y = local(step, rank, world)
        adam.zero_grad(set_to_none=False)
        loss_fn(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)  # in place: the gradients are all a step holds, at any time
            p.grad /= world
        adam.step()
    return memory(list(model.parameters()), adam), nbytes(p.grad for p in model.parameters())


def measured() -> dict:
    """On every rank: what it holds after training, for plain data parallelism, ZeRO-1, ZeRO-2 and FSDP; and
    `PEAK`: the gradients' bytes at their fullest within a step, for the first three."""
    (dp, dp_peak), (z1, z1_peak), (z2, z2_peak) = unsharded(), zero(stage=1, measure=True), zero(measure=True)
    return {"data parallel": dp, "ZeRO-1": z1, "ZeRO-2": z2, "FSDP": fsdp(measure=True),
            PEAK: {"data parallel": dp_peak, "ZeRO-1": z1_peak, "ZeRO-2": z2_peak}}
