# case: p2p_irecv_anysource_halo
# class: p2p/unmatched
# names: p2p_unmatched
# world: 4
# culprits: 0,1,2,3
# cause: dist.irecv, line 39
# nccl: no
"""irecv_anysource_halo -- halo exchange with irecv() lacking `src`: left/right halos swap.

Reports: https://github.com/pytorch/pytorch/pull/47137 and its reland
https://github.com/pytorch/pytorch/pull/49383 ("Support
torch.distributed.irecv(src=None, ...)": src=None means recv_anysource; the reviewer
notes "recvAnySource can potentially recv from anywhere"). Halo-exchange shape from
the MPI_ANY_SOURCE bugs such as https://github.com/ornladios/ADIOS2/issues/3344.
Not one specific PyTorch user report; re-authored.

Mistake: a 1-D ring of 4 ranks. Each rank posts irecv(left_halo) and
irecv(right_halo) without `src`, assuming the first buffer gets the left neighbour.
Every rank first sends its left boundary, then (after some compute) its right
boundary, so the first message to arrive comes from the RIGHT neighbour and lands
in left_halo.

What torchrun shows: no error/warning; every rank prints WRONG (halos swapped); exit 0.
Culprits: ranks 0,1,2,3 (each rank's two dist.irecv lines).
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
recvs = [dist.irecv(left_halo), dist.irecv(right_halo)]  # BUG: no src -> any source

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
