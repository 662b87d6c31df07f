# case: mismatch_shape_eval_rank0
# class: mismatch/shape
# names: mismatch
# world: 3
# culprits: 0
# cause: all_reduce, line 27
# nccl: yes
"""Halfway through training rank 0 alone runs the validation, whose all_reduce of [error, count] meets the other
ranks' all_reduce of the next step's gradients, a collective of another shape: a wrong loss, then a hang."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
model = torch.nn.Linear(4, 1).to(device)
val_x, val_y = torch.randn(6, 4, device=device), torch.randn(6, 1, device=device)


def evaluate():
    with torch.no_grad():
        err = torch.stack([(model(val_x) - val_y).pow(2).sum(), torch.tensor(float(len(val_y)), device=device)])
    dist.all_reduce(err)  # the error and the count, summed over the ranks
    return (err[0] / err[1]).item()


for step in range(4):
    x = torch.randn(8, 4, device=device)
    model(x).pow(2).mean().backward()
    with torch.no_grad():
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p -= 0.1 * p.grad / world
            p.grad = None
    if step == 1 and rank == 0:
        print(f"step {step}: validation loss {evaluate():.4f}")
dist.destroy_process_group()
