"""f4: 2 ranks. Pattern: uneven inputs -- each rank stops its training loop by its
OWN data length; the rank with less data leaves the loop and calls the final
metric all_reduce (1 element) while the other rank issues the next async
gradient all_reduce (1024 elements). Cf. pytorch issue #33148
(https://github.com/pytorch/pytorch/issues/33148, "Support uneven DDP inputs").
Culprit: rank 1 (3 batches vs 5) diverges first: its metric all_reduce
(line 28) meets rank 0's async gradient all_reduce (line 23) at step 3.
Mismatch: all_reduce shape [1] (line 28, rank 1) vs all_reduce shape [1024]
(line 23, rank 0).
"""
import datetime
import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
torch.manual_seed(rank)
data = [torch.randn(16, 1024) for _ in range(5 if rank == 0 else 3)]
w = torch.zeros(1024)
seen = 0
for batch in data:                      # loop length = this rank's data length
    grad = (batch * w.sigmoid()).mean(0)
    work = dist.all_reduce(grad, async_op=True)
    seen += batch.shape[0]
    work.wait()
    w -= 0.1 * grad
metric = torch.tensor([float(seen)])
dist.all_reduce(metric)                 # rank 1 gets here while rank 0 is still in the loop
dist.destroy_process_group()
print(f"rank {rank} done, metric {metric.item()}")
