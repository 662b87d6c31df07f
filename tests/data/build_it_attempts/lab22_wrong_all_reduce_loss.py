"""Lab 22 (data parallelism), task `my_naive()` (section 1 cell).

WRONG.
Property violated: the gradients must be averaged. The learner averages the LOSS with dist.all_reduce and
calls backward on it; dist.all_reduce is invisible to autograd, so each rank's gradient is still that of its
own slice only, and the ranks' models drift apart (rank 3, with the hard samples, differs most).
Values: right only at N=1; wrong at every N >= 2 (and the ranks disagree with each other).
Source: a frequent forum question ("I all_reduce the loss before backward, why do my replicas diverge?").
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
        loss = loss_fn(model(x, hard), y)
        dist.all_reduce(loss.data)
        loss.data /= world
        loss.backward()
        opt.step()
    return weights(model)
