# case: missing_ranks_short_shard
# fixed: the number of steps comes from the whole dataset (the remainder dropped), the same on every rank
# world: 3
# nccl: yes
"""Each rank trains on every third of 11 samples in full batches of 2, for as many steps as the smallest shard
allows, so every rank makes the same number of gradient all_reduces."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

BATCH = 2
torch.manual_seed(0)
samples, targets = torch.randn(11, 4), torch.randn(11)
shard_x, shard_y = samples[rank::world].to(device), targets[rank::world].to(device)  # 4, 4 and 3 samples
weights = torch.zeros(4, device=device, requires_grad=True)

steps = (len(samples) // world) // BATCH  # the same on every rank: the remainder is dropped
for step in range(steps):
    x = shard_x[step * BATCH:(step + 1) * BATCH]
    y = shard_y[step * BATCH:(step + 1) * BATCH]
    loss = (x @ weights - y).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        dist.all_reduce(weights.grad)
        weights -= 0.1 * weights.grad / world
        weights.grad = None
print(f"rank {rank}: {steps} steps, weights {[round(w, 3) for w in weights.tolist()]}")
dist.destroy_process_group()
