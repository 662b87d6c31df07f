"""A collective mismatch: one rank broadcasts while the others all_reduce. PyTorch waits 30 minutes on this;
`python -m sandbox.run -n 4 examples/mismatch.py` names it in about a second."""
import torch
import torch.distributed as dist


def step(t):
    if dist.get_rank() == 2:
        dist.broadcast(t, src=0)  # BUG: rank 2 takes another branch
    else:
        dist.all_reduce(t)


dist.init_process_group("gloo")
t = torch.ones(4)
for i in range(3):
    print(f"step {i}")
    step(t)
dist.destroy_process_group()
