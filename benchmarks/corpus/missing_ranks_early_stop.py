# case: missing_ranks_early_stop
# class: missing_ranks
# names: missing_ranks
# world: 2
# culprits: 1
# cause: all_reduce, line 33
# nccl: yes
"""Each rank stops training when the loss on its own validation shard drops below the target: rank 1's shard is
easy and it breaks out of the loop early, while rank 0, whose shard holds a mislabelled sample, waits for it in the
next gradient all_reduce."""
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
        val_loss = (val_x @ weights - val_y).pow(2).mean().item()  # this rank's shard only
    if val_loss < TARGET:
        print(f"rank {rank}: validation loss {val_loss:.3f} < {TARGET} at epoch {epoch}, stopping")
        break
print(f"rank {rank}: trained for {epoch + 1} epochs")
dist.destroy_process_group()
