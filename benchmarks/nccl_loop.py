"""The reference for `python -m sandbox.bench --gpu`: a plain torch NCCL all_reduce loop, no sandbox, under torchrun.

    torchrun --nproc-per-node 2 benchmarks/nccl_loop.py [SIZE_MIB] [ITERS]

Prints the median bus bandwidth (nccl-tests' definition for all_reduce: size / time * 2(n-1)/n) in GB/s.
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

size_mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 20
rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
n = dist.get_world_size()
t = torch.ones(size_mib * (1 << 20) // 4, device="cuda")
for _ in range(5):
    dist.all_reduce(t)
torch.cuda.synchronize()
times = []
for _ in range(iters):
    dist.barrier()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    dist.all_reduce(t)
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
med = statistics.median(times)
if rank == 0:
    print(f"plain torch NCCL all_reduce, {n} GPUs, {size_mib} MiB: median {med * 1e3:.2f} ms, "
          f"busbw {size_mib * (1 << 20) / med * 2 * (n - 1) / n / 1e9:.1f} GB/s")
dist.destroy_process_group()
