"""Tag mix-up hidden by arrival order; irecvs posted after the isends (3 ranks).

Rank 0 consumes two streams with irecv(tag=...) and no src: activations from
rank 1 (tag ACT) and a gradient norm from rank 2 (tag NORM). A copy-paste made
NORM == ACT, so the tags no longer tell the messages apart and each irecv takes
the oldest pending message: same failure class as dropped tags in
https://github.com/meta-pytorch/torchcomms/pull/2991 ("all sends matched the first
recv regardless of key") and https://github.com/pytorch/pytorch/issues/94819.

Passes: the usual schedule. Rank 1 isends at once, rank 2 ~0.15 s later, rank 0
posts its irecvs after ~0.4 s of its own work; rank 1's older message matches the
first irecv, so the mix-up is invisible.
Fails: rank 1 held back >= 0.2 s before its isend (rank 1's call 3;
init_process_group=1, barrier=2), or rank 1 slow by >= 0.2 s before every call:
rank 2's message is now the older one, the buffers are swapped and rank 0's
assert fires.
"""

import datetime
import time

import torch
import torch.distributed as dist

ACT = 1
NORM = 1  # BUG: copy-paste, should be a distinct tag (2)

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
dist.barrier()
if rank == 0:
    time.sleep(0.4)  # rank 0 finishes its own micro-batch before looking at inputs
    act, norm = torch.empty(4), torch.empty(4)
    reqs = [dist.irecv(act, tag=ACT), dist.irecv(norm, tag=NORM)]
    for r in reqs:
        r.wait()
    assert torch.all(act == 1.0) and torch.all(norm == 7.0), (act, norm)
elif rank == 1:
    dist.isend(torch.full((4,), 1.0), dst=0, tag=ACT).wait()
else:
    time.sleep(0.15)  # stands in for computing the gradient norm
    dist.isend(torch.full((4,), 7.0), dst=0, tag=NORM).wait()
dist.barrier()
dist.destroy_process_group()
