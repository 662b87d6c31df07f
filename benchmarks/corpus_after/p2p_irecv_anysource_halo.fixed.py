# case: p2p_irecv_anysource_halo
# fixed: post each halo irecv with its neighbour as src
# world: 4
# nccl: no
"""irecv_anysource_halo.fixed -- correct twin of irecv_anysource_halo.py.

Report: https://github.com/pytorch/pytorch/pull/47137
Fix (minimal): post each halo irecv with its neighbour as src.
What torchrun shows: every rank prints OK, no WRONG line, exit 0.
"""
import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 4, "run with --nproc-per-node 4"
left, right = (rank - 1) % world, (rank + 1) % world

field = torch.arange(4, dtype=torch.float32) + 100 * rank
left_halo, right_halo = torch.zeros(1), torch.zeros(1)
recvs = [dist.irecv(left_halo, src=left), dist.irecv(right_halo, src=right)]  # FIX

s1 = dist.isend(field[:1].clone(), dst=left)   # my left edge -> left neighbour
time.sleep(0.5)                                # interior compute
s2 = dist.isend(field[-1:].clone(), dst=right)  # my right edge -> right neighbour
for w in recvs + [s1, s2]:
    w.wait()

exp_left = torch.tensor([100.0 * left + 3])   # left neighbour's right edge
exp_right = torch.tensor([100.0 * right])     # right neighbour's left edge
if not (torch.equal(left_halo, exp_left) and torch.equal(right_halo, exp_right)):
    print(f"WRONG rank {rank}: left_halo {left_halo.item()} right_halo {right_halo.item()}"
          f" expected {exp_left.item()} {exp_right.item()}", flush=True)
else:
    print(f"OK rank {rank}: halos {left_halo.item()} {right_halo.item()}", flush=True)

dist.destroy_process_group()
