"""ok2: 2 ranks. Correct twin of f4: uneven inputs handled the way suggested in
pytorch issue #33148 (https://github.com/pytorch/pytorch/issues/33148): every
step all ranks all_reduce a "has data" flag asynchronously, together with the
gradient all_reduce, and all ranks stop as soon as any rank runs out of data.
Every async op is waited. Nothing dies; no culprit.
Async ops: all_reduce line 23 (flag), all_reduce line 24 (gradient).
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
it = iter(data)
while True:
    batch = next(it, None)
    has = torch.tensor([0 if batch is None else 1])
    grad = torch.zeros(1024) if batch is None else (batch * w.sigmoid()).mean(0)
    work_flag = dist.all_reduce(has, op=dist.ReduceOp.MIN, async_op=True)
    work_grad = dist.all_reduce(grad, async_op=True)
    work_flag.wait(); work_grad.wait()
    if has.item() == 0:
        break
    seen += batch.shape[0]
    w -= 0.1 * grad
metric = torch.tensor([float(seen)])
dist.all_reduce(metric)
dist.destroy_process_group()
print(f"rank {rank} done, metric {metric.item()}")
