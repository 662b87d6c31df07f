# case: p2p_async_allreduce_nowait
# fixed: wait on the Work handle before touching the buffer
# world: 2
# nccl: yes
"""async_allreduce_nowait.fixed -- correct twin of async_allreduce_nowait.py.

Report: https://github.com/OpenNMT/OpenNMT-py/issues/2295
Fix (minimal): wait on the Work handle before touching the buffer.
What torchrun shows: every rank prints OK, no WRONG line, exit 0.
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
work = dist.all_reduce(flat, async_op=True)
work.wait()  # FIX: buffer is valid only after wait()
flat.div_(world)  # average
param.sub_(0.1 * flat)  # SGD step

expected = 1.0 - 0.1 * sum(r + 1 for r in range(world)) / world
bad = (param - expected).abs().gt(1e-6).sum().item()
if bad:
    print(f"WRONG rank {rank}: {bad}/{n} params differ from {expected}; param[0]={param[0].item()}", flush=True)
else:
    print(f"OK rank {rank}: param == {expected}", flush=True)

dist.destroy_process_group()
