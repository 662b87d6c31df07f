# case: p2p_async_allreduce_nowait
# class: p2p/unwaited
# names: unwaited
# world: 2
# culprits: 0,1
# cause: dist.all_reduce, line 38
# nccl: yes
"""async_allreduce_nowait -- all_reduce(async_op=True) whose Work is never waited.

Report: https://github.com/OpenNMT/OpenNMT-py/issues/2295 ("Bug in the
all_reduce_and_rescale_tensors function": `torch.distributed.all_reduce(buffer_t[:offset],
async_op=True)` followed directly by `buffer_t.div_(rescale_denom)`; switching
async_op back fixed a 1-GPU vs 2-GPU mismatch, see #2335 in that thread).

Mistake: the author treats async_op=True as "faster, same result". With it,
all_reduce returns a Work handle at once and the buffer is only valid after
work.wait(). The code rescales the flat gradient buffer and applies the SGD step
immediately, reading a buffer that is not (fully) reduced yet.

What torchrun shows: no error, no warning; both ranks print WRONG (parameters are
not the same on the two ranks / not equal to the averaged step); exit 0.
Culprits: ranks 0 and 1 (the all_reduce line: missing .wait()).
"""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 2, "run with --nproc-per-node 2"

n = 1 << 22  # 4M floats: one fused gradient bucket
param = torch.ones(n)
grad = torch.full((n,), float(rank + 1))  # rank r's local gradient

flat = grad.clone()
work = dist.all_reduce(flat, async_op=True)  # BUG: handle dropped, never waited
flat.div_(world)  # average
param.sub_(0.1 * flat)  # SGD step

expected = 1.0 - 0.1 * sum(r + 1 for r in range(world)) / world
bad = (param - expected).abs().gt(1e-6).sum().item()
if bad:
    print(f"WRONG rank {rank}: {bad}/{n} params differ from {expected}; param[0]={param[0].item()}", flush=True)
else:
    print(f"OK rank {rank}: param == {expected}", flush=True)

dist.destroy_process_group()
