"""Lab 22 (data parallelism), task `my_naive()` (section 1 cell).

WRONG (for this lab's algorithm; mathematically equivalent here only because the optimizer is plain SGD).
Property violated: data parallelism gives every rank the same averaged GRADIENT before the optimizer step.
This steps each rank on its own slice's gradient, then averages the WEIGHTS after the step
(model averaging / "local SGD with period 1"). For SGD (even with momentum) it is linear, so the weights
equal the reference; with Adam or any nonlinear optimizer state, or with gradient clipping, it does not.
Each rank's optimizer sees a different gradient; the gradient it holds is never the global one.
Values: right at every world size for this lab's SGD. A check that requires the gradients to be averaged
(all_reduce of p.grad before opt.step, or ranks' p.grad equal at the step) catches it.
Source: model averaging is a known, different algorithm (local SGD / federated averaging); learners reach
for it because it sidesteps the None gradients of the unused `extra` head.
"""
import torch
import torch.distributed as dist
from sandbox.course.data_parallel import LR, STEPS, local, loss_fn, make_model, weights


def my_naive():
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        x, y, hard = local(step, rank, world)
        opt.zero_grad()
        loss_fn(model(x, hard), y).backward()
        opt.step()
        with torch.no_grad():
            for p in model.parameters():
                dist.all_reduce(p)
                p /= world
    return weights(model)
