# case: missing_ranks_early_stop
# fixed: the ranks average the validation loss with an all_reduce before deciding, so all stop at the same epoch
# world: 2
# nccl: yes
"""The ranks stop training when the validation loss, averaged over every rank's shard, drops below the target, so
they all stop at the same epoch."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

TARGET = 0.5
torch.manual_seed(0)
true_w = torch.tensor([1.0, -2.0, 0.5, 3.0])
train_x, val_x = torch.randn(16, 4), torch.randn(8, 4)
train_y, val_y = train_x @ true_w, val_x @ true_w
val_y[0] += 5.0  # one mislabelled validation sample; it lands in rank 0's shard
train_x, train_y = train_x[rank::world].to(device), train_y[rank::world].to(device)
val_x, val_y = val_x[rank::world].to(device), val_y[rank::world].to(device)

weights = torch.zeros(4, device=device, requires_grad=True)
for epoch in range(50):
    (train_x @ weights - train_y).pow(2).mean().backward()
    with torch.no_grad():
        dist.all_reduce(weights.grad)
        weights -= 0.05 * weights.grad / world
        weights.grad = None
        val_loss = (val_x @ weights - val_y).pow(2).mean()
        dist.all_reduce(val_loss)  # the mean over every shard: the same decision on every rank
        val_loss = val_loss.item() / world
    if val_loss < TARGET:
        print(f"rank {rank}: validation loss {val_loss:.3f} < {TARGET} at epoch {epoch}, stopping")
        break
print(f"rank {rank}: trained for {epoch + 1} epochs")
dist.destroy_process_group()
