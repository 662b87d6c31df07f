"""Lab 22 (data parallelism), task `my_naive()` (section 1 cell).

WRONG.
Property violated: no data parallelism at all. Every rank trains on the WHOLE global batch
(`local(step, 0, 1)`) and never communicates; the ranks' models agree because they compute the same thing.
Values: right at every world size (the single-process reference is literally what each rank runs). Only a
check that requires one all_reduce (of gradients) per step, or that each rank touches only its own slice,
catches it. N times the compute, zero communication.
Source: the "every rank trains on the full dataset" mistake (no DistributedSampler / no sharding), one of
the most asked DDP questions on the PyTorch forum ("DDP is not faster", "each GPU sees all data").
Imports the same sandbox names as the notebook's learner cell.
"""
import torch
import torch.distributed as dist
from sandbox.course.data_parallel import LR, STEPS, local, loss_fn, make_model, weights


def my_naive():
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        x, y, hard = local(step, 0, 1)  # the whole batch, on every rank
        opt.zero_grad()
        loss_fn(model(x, hard), y).backward()
        opt.step()
    return weights(model)
