# case: p2p_recv_anysource_slots
# class: p2p/unmatched
# names: p2p_unmatched
# world: 3
# culprits: 0
# cause: dist.recv, line 37
# nccl: no
"""recv_anysource -- dist.recv(tensor) without `src` takes whichever sender arrives first.

Reports: https://github.com/pytorch/pytorch/pull/2855 ("Make distributed recv return
sender rank" -- recv without src is an any-source receive, the only way to know the
sender is its return value) and the MPI_ANY_SOURCE mix-ups it mirrors, e.g.
https://github.com/ornladios/ADIOS2/issues/3344. I am not aware of one canonical
PyTorch issue for this exact program; the pattern is re-authored from those.

Mistake: rank 0 collects per-worker statistics with `recv(a)` then `recv(b)`,
believing the first call receives worker 1's tensor and the second worker 2's.
Without `src`, recv matches any sender: worker 2 (which has less work) arrives
first and lands in `a`.

What torchrun shows: no error/warning; rank 0 prints WRONG (slots swapped); exit 0.
Culprit: rank 0 (the two dist.recv lines).
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
    dist.recv(from_w1)  # BUG: no src -> any source
    dist.recv(from_w2)  # BUG: no src -> any source
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
