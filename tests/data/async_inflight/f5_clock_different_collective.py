"""f5: 2 ranks. Pattern: a rank calls a different collective than its peers --
rank 1 decides by its OWN clock (wall-time budget, simulated deterministically
with a per-rank step time) that it must checkpoint, and calls broadcast of the
checkpoint-step while rank 0 issues the next async loss all_reduce.
Cf. Lightning issue #19045 (https://github.com/Lightning-AI/pytorch-lightning/issues/19045,
"Detected mismatch between collectives on ranks").
Culprit: rank 1 diverges: broadcast (line 23) vs rank 0's async all_reduce
(line 26) at step 2.
"""
import datetime
import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
step_time = 1.0 if rank == 0 else 4.0   # rank 1's clock runs "slower"
budget, clock = 10.0, 0.0
x = torch.randn(256)
for step in range(4):
    clock += step_time
    if clock > budget:                  # rank 1 only, at step 2
        flag = torch.tensor([step], dtype=torch.int64)
        dist.broadcast(flag, src=1)     # "checkpoint now" -- peers never call this
        break
    loss = (x * step).sum().reshape(1)
    work = dist.all_reduce(loss, async_op=True)
    x = x.tanh()                        # overlapped compute
    work.wait()
dist.destroy_process_group()
print(f"rank {rank} done")
