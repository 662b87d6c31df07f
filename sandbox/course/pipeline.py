"""Pipeline parallelism with send and recv: a model of `world` stages, one per rank, fed a batch in micro-batches.
Lab 25 has the learner write two schedules, GPipe (every forward, then every backward) and 1F1B (after a warm-up,
one forward then one backward), and measure the bubble: the time a stage waits for its neighbours.

Why a fixed sleep stands in for each stage's compute (`forward` sleeps FORWARD_S, `backward` BACKWARD_S, then do
the real, tiny arithmetic): the bubble is a property of the schedule, and it shows only when compute dominates.
Four ranks doing real matmuls on a 2-core machine would take turns on the cores and blur the picture; sleeping
ranks do not compete, so the timeline looks the same on any machine. The gradients are real and exact.

Why every schedule starts and ends with a barrier (`start`, `finish`): the bubble is idle time over a window every
rank shares. The first barrier starts all clocks together; the last one makes a stage that finished early wait for
the others, which is exactly the bubble at the end of the schedule. `bubble(res)` reads it from the run's events:
per rank, the time spent inside torch.distributed calls (a recv waiting for its neighbour, a send waiting to be
received, the final barrier) over the time between the two barriers. GPipe's formula for it, with every stage's
forward and backward equally long and communication free, is (p - 1) / (m + p - 1); 1F1B has the same bubble and
holds at most p - rank micro-batches' activations instead of m (`in_flight`, a rule the check applies).

A gloo send returns only when the peer has posted the matching recv: a 1F1B written with blocking sends deadlocks
(the last stage sends a gradient back while its neighbour sends it the next activation: the lab's first attempt,
which the lab holds in its own cell and the tests read from there). `one_f_one_b` posts its sends with isend and
waits on them at the end.
"""
from __future__ import annotations

import os
import time
from collections import deque

import torch
import torch.nn.functional as F

from sandbox.course.pipeline_measure import (GUESS_TOLERANCE, bubble, bubble_formula, bubble_line,  # noqa: F401
                                             held, held_over_time, held_png, holding)

D, BATCH = 8, 16  # width of every stage, rows in the batch (m must divide it)
FORWARD_S, BACKWARD_S = 0.05, 0.1  # a stage's simulated compute: the backward costs twice the forward
# A run's ranks scale that compute by this variable's value: `check` runs the cases it draws no timeline of at a
# tenth (what it checks, the values and the micro-batches each stage holds, follows from the order of each stage's
# own calls, not from how long they take); a timeline, and a bubble measured from it, need the full pace
PACE_ENV = "SANDBOX_PP_PACE"
CHECK_PACE = 0.1


def _compute(seconds: float) -> None:
    try:
        pace = float(os.environ.get(PACE_ENV, 1))
    except ValueError:
        pace = 1.0
    time.sleep(seconds * max(pace, 0.0))


# ----------------------------------------------------------------------------------------------- the model
def stage_params(stage: int) -> dict:
    """Stage `stage`'s parameters (seeded by the stage: the same in any process), as leaves that want gradients."""
    g = torch.Generator().manual_seed(100 + stage)
    return {"w": (torch.randn(D, D, generator=g) / D ** 0.5).requires_grad_(),
            "b": (torch.randn(D, generator=g) * 0.1).requires_grad_()}


def micro_batches(m: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The batch cut into m micro-batches of BATCH // m rows: [(x, target), ...]."""
    if m < 1 or BATCH % m:
        raise ValueError(f"m={m} does not divide the batch of {BATCH} rows; use 1, 2, 4, 8 or 16.")
    g = torch.Generator().manual_seed(7)
    x, target = torch.randn(BATCH, D, generator=g), torch.randn(BATCH, D, generator=g)
    return list(zip(x.chunk(m), target.chunk(m)))


def apply_stage(p: dict, x: torch.Tensor) -> torch.Tensor:
    """One stage's arithmetic: Linear then tanh."""
    return torch.tanh(F.linear(x, p["w"], p["b"]))


def loss_of(y: torch.Tensor, target: torch.Tensor, m: int) -> torch.Tensor:
    """One micro-batch's share of the batch's mean squared error (m equal micro-batches add up to the batch's)."""
    return ((y - target) ** 2).mean() / m


def reference(n: int, m: int = 4) -> dict:
    """The whole model in one process on the whole batch: the gradients of each stage, which rank r must return."""
    stages = [stage_params(s) for s in range(n)]
    data = micro_batches(m)
    x = torch.cat([xb for xb, _ in data])
    target = torch.cat([t for _, t in data])
    for p in stages:
        x = apply_stage(p, x)
    ((x - target) ** 2).mean().backward()
    return {"per_rank": [{"w": p["w"].grad, "b": p["b"].grad} for p in stages]}


# ----------------------------------------------------------------------------------------------- what a stage calls
def start() -> tuple[int, int, dict]:
    """Wait for every stage (the clocks start together); this rank, the number of stages and this stage's
    parameters. The group is the sandbox's: `lab.check` makes it when the schedule does not."""
    import torch.distributed as dist
    # A process's first backward imports what torch._dynamo imports (sympy, symbolic shapes: seconds here). One
    # tiny backward before the clocks start keeps that out of the measured window. (Because this module names
    # torch._dynamo, a run of its own functions has the sandbox import it once before it forks the ranks; a
    # notebook's warm sandbox imports it between runs.)
    apply_stage(stage_params(0), torch.zeros(1, D)).sum().backward()
    dist.barrier()
    rank = dist.get_rank()
    return rank, dist.get_world_size(), stage_params(rank)


def forward(p: dict, x: torch.Tensor) -> torch.Tensor:
    """This stage's forward on one micro-batch, with its simulated compute time. On a sandbox rank, noted in the
    trace (forward: start, end): what the check counts as a micro-batch taken in, and the timeline draws."""
    from sandbox import lab
    lab.note(forward="start")
    _compute(FORWARD_S)
    y = apply_stage(p, x)
    lab.note(forward="end")
    return y


def backward(y: torch.Tensor, grad: torch.Tensor | None = None) -> None:
    """This stage's backward for one micro-batch (`grad`: dL/dy from the next stage; None for the loss itself),
    with its simulated compute time. The gradients add up in the parameters' .grad and in the input's. Noted as
    `forward` is (backward: start, end): its end lets go of the micro-batch's activations."""
    from sandbox import lab
    lab.note(backward="start")
    _compute(BACKWARD_S)
    y.backward(grad)
    lab.note(backward="end")


def finish(p: dict) -> dict:
    """Wait for every stage (a stage done early idles here: the end of the bubble); this stage's gradients."""
    import torch.distributed as dist
    dist.barrier()
    return {"w": p["w"].grad, "b": p["b"].grad}


# ----------------------------------------------------------------------------------------------- the solutions
def gpipe(m: int = 4) -> dict:
    """GPipe: every micro-batch forward through the stages, then every one backward (last in, first out)."""
    import torch.distributed as dist
    rank, world, p = start()
    data = micro_batches(m)
    first, last = rank == 0, rank == world - 1
    stash = []
    for i in range(m):
        if first:
            x = data[i][0]
        else:
            x = torch.empty_like(data[i][0])
            dist.recv(x, src=rank - 1)
            x.requires_grad_()  # its gradient is what this stage sends back
        y = forward(p, x)
        if last:
            y = loss_of(y, data[i][1], m)
        else:
            dist.send(y.detach(), dst=rank + 1)
        stash.append((x, y))
    for x, y in reversed(stash):
        if last:
            backward(y)
        else:
            grad = torch.empty_like(y)
            dist.recv(grad, src=rank + 1)
            backward(y, grad)
        if not first:
            dist.send(x.grad, dst=rank - 1)
    return finish(p)


def one_f_one_b(m: int = 8) -> dict:
    """1F1B: stage r runs p - 1 - r forwards (warm-up), then one forward and one backward in turn, then the
    backwards left (cool-down). Sends are posted with isend, so a stage sending to a neighbour that is itself
    sending never waits: both go on to their recv, which the other's isend has already met."""
    import torch.distributed as dist
    rank, world, p = start()
    data = micro_batches(m)
    first, last = rank == 0, rank == world - 1
    warmup = min(world - 1 - rank, m)
    stash, sends = deque(), []

    def forward_step(i):
        if first:
            x = data[i][0]
        else:
            x = torch.empty_like(data[i][0])
            dist.recv(x, src=rank - 1)
            x.requires_grad_()
        y = forward(p, x)
        if last:
            y = loss_of(y, data[i][1], m)
        else:
            sends.append(dist.isend(y.detach(), dst=rank + 1))
        stash.append((x, y))

    def backward_step():
        x, y = stash.popleft()  # the oldest micro-batch: the next stage sends gradients back in forward order
        if last:
            backward(y)
        else:
            grad = torch.empty_like(y)
            dist.recv(grad, src=rank + 1)
            backward(y, grad)
        if not first:
            sends.append(dist.isend(x.grad, dst=rank - 1))

    for i in range(warmup):
        forward_step(i)
    for i in range(warmup, m):
        forward_step(i)
        backward_step()
    for _ in range(warmup):
        backward_step()
    for work in sends:
        work.wait()
    return finish(p)


# ----------------------------------------------------------------------------------------------- the rules
def in_flight(schedule: str, m: int):
    """A pipeline schedule's rule (a `sandbox.lab.Rule`), read from the order of each stage's point-to-point calls
    (`held`): at its peak stage r of p holds the activations of all m micro-batches under GPipe (every forward before
    any backward), and of min(p - r, m) under 1F1B (p - 1 - r forwards of warm-up, then one forward and one backward
    in turn; exactly, where the stage ran the lab's forward and backward; one more allowed where only the order of
    its calls tells, for a recv posted ahead). Fewer, under either, means the micro-batches went one at a
    time through part of the pipeline (no micro-batches at all, a warm-up of 0): the right gradients, a longer
    bubble. More, under 1F1B, is memory it does not need."""
    from sandbox import lab

    if schedule not in ("gpipe", "1f1b"):
        raise ValueError(f"schedule is 'gpipe' or '1f1b', not {schedule!r}.")
    name = "GPipe" if schedule == "gpipe" else "1F1B"

    def least(r: int, p: int) -> int:
        return m if schedule == "gpipe" else min(p - r, m)

    def found(res):
        p, got = res.world_size, holding(res)
        few = [(r, k) for r, (k, _) in sorted(got.items()) if k < least(r, p)]
        many = [(r, k) for r, (k, exact) in sorted(got.items()) if schedule == "1f1b" and k > least(r, p) + (not exact)]
        if few:
            r, k = few[0]
            return (f"stage {r} held the activations of {k} micro-batch{'es' if k != 1 else ''} at most, where {name}"
                    f" holds {least(r, p)} at once: micro-batches went through it one at a time")
        if many:
            r, k = many[0]
            return f"stage {r} held the activations of {k} micro-batches at once, where {name} holds {least(r, p)}"
        return None

    says = ("every stage holds all m micro-batches at once (every forward before any backward), as GPipe does"
            if schedule == "gpipe" else "stage r holds p - r micro-batches at its peak, no fewer and no more, as 1F1B"
                                        " does")
    return lab.Rule(says=says, found=found)


# (stages, micro-batches) each schedule is checked with, in turn: m < p among them, and an odd number of stages
CASES = {"gpipe": ((4, 4), (4, 2), (3, 2)), "1f1b": ((4, 8), (4, 2), (3, 4))}


def check(fn, schedule: str, ms: tuple[int, ...] | None = None, n: int | None = None, **options):
    """Lab 25's check of a learner's schedule: `lab.check` on each (stages, m) of CASES[schedule] in turn, or on `n`
    stages with each m of `ms` where either is given, against `reference`, with the schedule's rule (`in_flight`)
    for that m. A schedule right for one m or p can be wrong for another: a loss divided by a fixed 4, a warm-up that
    forgets m < p, a stage count written in. Returns the first case's answer that is not right, said with its p and
    m; else the first case's, which says every case it held for. Without `timeline`, the stages' simulated compute
    runs at CHECK_PACE of its time (the verdict does not depend on it)."""
    from sandbox import lab, words
    from sandbox.lab.checks import in_turn

    if schedule not in CASES:
        raise ValueError(f"schedule is 'gpipe' or '1f1b', not {schedule!r}.")
    cases = CASES[schedule] if ms is None and n is None else \
        tuple((n or 4, m) for m in (ms or dict.fromkeys(m for _, m in CASES[schedule])))
    timeline, show = options.pop("timeline", False), options.pop("show", True)
    if not timeline:
        options["env"] = {PACE_ENV: str(CHECK_PACE)} | (options.get("env") or {})
    return in_turn(cases,
                   lambda c: lab.check(fn, n=c[0], kwargs={"m": c[1]}, reference=reference,
                                       rules=[in_flight(schedule, c[1])], show=False, **options),
                   lambda c: f"On {c[0]} stages with m = {c[1]}",
                   lambda rest: words.listed([f"on {p} stages with m = {m}" for p, m in rest]),
                   timeline=timeline, show=show)
