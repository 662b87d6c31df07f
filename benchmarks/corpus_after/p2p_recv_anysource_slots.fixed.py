# case: p2p_recv_anysource_slots
# fixed: name the sender: recv(from_w1, src=1) and recv(from_w2, src=2)
# world: 3
# nccl: no
"""recv_anysource.fixed -- correct twin of recv_anysource.py.

Report: https://github.com/pytorch/pytorch/pull/2855
Fix (minimal): name the sender: recv(from_w1, src=1) and recv(from_w2, src=2).
What torchrun shows: every rank prints OK, no WRONG line, exit 0.
"""
import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 3, "run with --nproc-per-node 3"

if rank == 0:
    from_w1 = torch.zeros(2)
    from_w2 = torch.zeros(2)
    dist.recv(from_w1, src=1)  # FIX
    dist.recv(from_w2, src=2)  # FIX
    exp1, exp2 = torch.tensor([1.0, 10.0]), torch.tensor([2.0, 20.0])
    if not (torch.equal(from_w1, exp1) and torch.equal(from_w2, exp2)):
        print(f"WRONG rank 0: worker1 slot {from_w1.tolist()} worker2 slot {from_w2.tolist()}"
              f" expected {exp1.tolist()} {exp2.tolist()}", flush=True)
    else:
        print("OK rank 0: per-worker stats in the right slots", flush=True)
else:
    time.sleep(1.0 if rank == 1 else 0.0)  # worker 1 has more work to do
    dist.send(torch.tensor([float(rank), 10.0 * rank]), dst=0)

dist.destroy_process_group()
