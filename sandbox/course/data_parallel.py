"""Lab 22, data parallelism built by hand: every rank holds the whole model and trains on its own slice of the batch;
the ranks average their gradients before each step, so each takes the step one process would take on the whole
batch (`reference(n)`, that process; everything else runs on the ranks). Two ways, side by side as picotron keeps
`DataParallelNaive` beside `DataParallelBucket`:
- `naive`: after backward, one `all_reduce` per parameter, divided by the world size. Every call pays the latency,
  and nothing moves until backward has finished.
- `Buckets`: a hook per parameter (`register_post_accumulate_grad_hook`) says when its gradient is final; buckets
  are filled in the order backward finishes them (last layer first), and a bucket's `all_reduce` starts, async, as
  soon as its last gradient lands, while backward goes on. `finish()` waits for them before the optimizer step.
  Buckets start in index order on every rank: collectives are matched by call order, not by name.

The model's `extra` head is used only by hard samples (`if hard.any():`), which all sit on the last rank: elsewhere
`extra` gets no gradient (`p.grad is None`), as a DDP model with unused parameters. Those ranks must still take part,
with zeros; skipping the call (`skip_none`, the lab's bug) makes the ranks call different collectives. The other
attempts are the plausible wrong ones the tests hold the checks to (no division, a bucket never waited, buckets
started out of order, every call after backward: right values, but `OVERLAP`, the bucketed part's rule, broken).
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn

from sandbox import lab, words

STEPS = 3
LR = 0.1
BATCH = 24  # the global batch: divisible by 2, 3 and 4 ranks, so every rank's slice has the same size
HARD = 2  # the last HARD samples of every batch are hard ones: only the last rank gets them
D_IN, D_HIDDEN, D_OUT = 8, 16, 4
CAP_BYTES = 256  # a bucket closes at this many bytes: the tiny model's are the head, extra, and each body layer


class Net(nn.Module):
    """An MLP with a correction head that only hard samples use: on a rank without one, `extra` gets no gradient."""

    def __init__(self, width: int = D_HIDDEN, depth: int = 2, extra: bool = True):
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(D_IN, width), nn.Tanh()]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), nn.Tanh()]
        self.body = nn.Sequential(*layers)
        self.extra = nn.Linear(width, D_OUT) if extra else None
        self.head = nn.Linear(width, D_OUT)

    def forward(self, x, hard):
        h = self.body(x)
        out = self.head(h)
        if self.extra is not None and hard.any():  # skip the extra head when no sample needs it
            out = out + hard.unsqueeze(1) * self.extra(h)
        return out


def make_model(**kw) -> Net:
    torch.manual_seed(0)  # every rank builds the same initial weights
    return Net(**kw)


def batch(step: int, size: int = BATCH):
    """The global batch of a step: inputs, targets and the hard-sample mask (the last HARD samples)."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(size, D_IN, generator=g)
    y = torch.randn(size, D_OUT, generator=g)
    hard = torch.zeros(size)
    hard[-HARD:] = 1.0
    return x, y, hard


def local(step: int, rank: int, world: int, size: int = BATCH):
    """This rank's contiguous slice of the step's global batch."""
    per = size // world
    return tuple(t[rank * per:(rank + 1) * per] for t in batch(step, size))


def loss_fn(out, y):
    return nn.functional.mse_loss(out, y)  # a mean: the average of equal slices' means is the whole batch's mean


def weights(model) -> dict:
    """The weights by name, flattened to lists: a wrong value is then named down to its index."""
    return {name: p.detach().reshape(-1).tolist() for name, p in model.named_parameters()}


def setup():
    """(rank, world size): `lab.check` makes the group before the function runs, and destroys it after."""
    return dist.get_rank(), dist.get_world_size()


def reference(n: int = 1, steps: int = STEPS) -> dict:
    """One process, the whole batch, SGD: every rank's weights after `steps` steps, for any number of ranks `n`."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(steps):
        x, y, hard = batch(step)
        opt.zero_grad()
        loss_fn(model(x, hard), y).backward()
        opt.step()
    return weights(model)


# ------------------------------------------------------------------------------------- part 1: naive
def naive(steps: int = STEPS) -> dict:
    rank, world = setup()
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(steps):
        x, y, hard = local(step, rank, world)
        opt.zero_grad()
        loss_fn(model(x, hard), y).backward()
        for p in model.parameters():
            if p.grad is None:  # FIX: unused on this rank: its share of the sum is zero, and it must still take part
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)  # the sum of every rank's gradient
            p.grad /= world  # FIX: the average, the gradient of the whole batch's mean loss
        opt.step()
    return weights(model)


def skip_none(steps: int = STEPS) -> dict:
    rank, world = setup()
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(steps):
        x, y, hard = local(step, rank, world)
        opt.zero_grad()
        loss_fn(model(x, hard), y).backward()
        for p in model.parameters():
            if p.grad is not None:  # BUG: a rank without hard samples skips extra's all_reduce; the others do not
                dist.all_reduce(p.grad)
                p.grad /= world
        opt.step()
    return weights(model)


# ------------------------------------------------------------------------------------- part 2: buckets
def train(wrap, steps: int = STEPS, **model_kw) -> dict:
    """The training loop of part 1 with the communication moved into `wrap`: `wrap(model)` once (install hooks),
    `.finish()` after each backward (wait for the buckets). The notes mark the forward's and the backward's start and
    end: for `OVERLAP`, and for the timeline's compute strips."""
    rank, world = setup()
    model = make_model(**model_kw)
    averaging = wrap(model)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(steps):
        x, y, hard = local(step, rank, world)
        opt.zero_grad()
        lab.note(forward="start", step=step)
        loss = loss_fn(model(x, hard), y)
        lab.note(forward="end", step=step)
        lab.note(backward="start", step=step)
        loss.backward()
        lab.note(backward="end", step=step)
        averaging.finish()
        opt.step()
    return weights(model)


class Buckets:
    """Gradients averaged in buckets whose all_reduce starts during backward, as DDP's reducer does."""

    def __init__(self, model, cap_bytes: int = CAP_BYTES):
        self.world = dist.get_world_size()
        self.buckets: list[list] = [[]]
        size = 0
        for p in reversed(list(model.parameters())):  # backward finishes the last layer first: it fills bucket 0
            if size >= cap_bytes:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += p.numel() * p.element_size()
        self.bucket_of = {p: i for i, b in enumerate(self.buckets) for p in b}
        for p in self.bucket_of:
            p.register_post_accumulate_grad_hook(self._ready)  # called when p.grad is final for this backward
        self.started_at: list[float] = []  # when each bucket's all_reduce started (time.time), for the timeline
        self._reset()

    def _reset(self):
        self.missing = [len(b) for b in self.buckets]  # gradients each bucket still waits for
        self.next = 0  # the next bucket to start: buckets start in index order on every rank
        self.works = []

    def _ready(self, p):
        self.missing[self.bucket_of[p]] -= 1
        self._start_ready()

    def _start_ready(self):
        while self.next < len(self.buckets) and self.missing[self.next] == 0:
            params = self.buckets[self.next]
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            self.started_at.append(time.time())
            self.works.append((dist.all_reduce(flat, async_op=True), flat, params))  # returns at once
            self.next += 1

    def finish(self):
        self._start_unused()
        for work, flat, params in self.works:
            work.wait()  # the optimizer must not read a gradient still being summed
            self._copy_back(flat, params)
        self._reset()

    def _start_unused(self):
        for p, i in self.bucket_of.items():
            if p.grad is None:  # unused on this rank: its hook never ran; its share of the sum is zero
                p.grad = torch.zeros_like(p)
                self.missing[i] -= 1
        self._start_ready()

    def _copy_back(self, flat, params):
        flat /= self.world
        for p, g in zip(params, flat.split([p.numel() for p in params])):
            p.grad.copy_(g.view_as(p))


def bucketed(steps: int = STEPS) -> dict:
    return train(Buckets, steps)


class Unwaited(Buckets):
    """Wrong: the buckets start during backward, but nobody waits for them before the optimizer reads the gradient."""

    def finish(self):
        self._start_unused()
        for _work, flat, params in self.works:
            self._copy_back(flat, params)
        self._reset()


class NoDivide(Buckets):
    """Wrong: the sum of the gradients, not their average (a step world-size times too long)."""

    def _copy_back(self, flat, params):
        for p, g in zip(params, flat.split([p.numel() for p in params])):
            p.grad.copy_(g.view_as(p))


class AsSoonAsComplete(Buckets):
    """Wrong: a bucket starts as soon as it is complete, whatever its index; ranks that did not use `extra` start
    the next buckets before extra's, rank 3 does not: the second call differs."""

    def _start_ready(self):
        begun = [params for _, _, params in self.works]
        for params, missing in zip(self.buckets, self.missing):
            if missing == 0 and not any(params is b for b in begun):
                flat = torch.cat([p.grad.reshape(-1) for p in params])
                self.works.append((dist.all_reduce(flat, async_op=True), flat, params))


def _overlap(res) -> str | None:
    """OVERLAP's finder: the ranks on which no asynchronous all_reduce started between a 'backward start' and
    'backward end'. A blocking all_reduce inside a hook starts during backward too, but backward waits for it to
    return: nothing overlaps."""
    from sandbox.course.work import during

    started = during(res, "all_reduce", only_async=True)
    idle = sorted(r for r, k in started.items() if k == 0)
    return (f"{words.ranks(idle)} started no asynchronous all_reduce while backward was running (one that blocks"
            " inside a hook holds backward until it returns)") if idle else None


def _before_step(res) -> str | None:
    """BEFORE_STEP's finder: the ranks on which an optimizer step (the tracer's `optim` event) came with no
    all_reduce started since the step before it (or since the start). A rank that steps no torch.optim optimizer
    is not judged by it."""
    late, since = set(), {}
    for e in res.events:
        if e.get("ev") == "enter" and e.get("op") == "all_reduce":
            since[e["rank"]] = True
        elif e.get("ev") == "optim":
            if not since.get(e["rank"]):
                late.add(e["rank"])
            since[e["rank"]] = False
    return (f"{words.ranks(sorted(late))} stepped the optimizer with no all_reduce since the step before: each"
            " optimizer saw its own rank's gradient, not the average (averaging the weights after a local step is"
            " another algorithm, model averaging, equal here only because plain SGD is linear)") if late else None


BEFORE_STEP = lab.Rule(says="the gradients are averaged before the optimizer steps", found=_before_step)
OVERLAP = lab.Rule(says="a bucket's all_reduce starts during backward, asynchronously (async_op=True), and backward"
                        " goes on while it runs", found=_overlap)
# what the reference cannot tell of part 1: a rank that trains on the whole batch alone has the same weights
COMMUNICATES = lab.communicates(min_calls=STEPS, says=f"the ranks communicate: each makes at least {STEPS} calls"
                                                      f" that move data, one a step (the gradients' all_reduce)")
