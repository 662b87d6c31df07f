# case: p2p_unwaited_isend_exit
# class: p2p/unwaited
# names: unwaited
# world: 2
# culprits: 0
# cause: isend, line 28
# nccl: no
"""The trainer hands its final weights to the evaluator rank with an isend so as not to block, then exits without
waiting on it: the evaluator, still scoring its own batch, posts its recv after the sender is gone."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
model = torch.nn.Linear(512, 512).to(device)
weights = torch.nn.utils.parameters_to_vector(model.parameters()).detach()

if rank == 0:  # trainer
    model(torch.randn(64, 512, device=device)).pow(2).mean().backward()
    with torch.no_grad():
        weights = torch.nn.utils.parameters_to_vector(model.parameters())
        weights -= 0.01 * torch.nn.utils.parameters_to_vector(p.grad for p in model.parameters())
    handoff = dist.isend(weights, dst=1)
    print("rank 0: weights sent")
else:  # evaluator
    with torch.no_grad():
        for _ in range(50):  # scores the batch it already had
            model(torch.randn(256, 512, device=device)).pow(2).mean()
    received = torch.empty_like(weights)
    dist.recv(received, src=0)
    print(f"rank 1: evaluating weights with norm {received.norm():.4f}")

dist.destroy_process_group()
