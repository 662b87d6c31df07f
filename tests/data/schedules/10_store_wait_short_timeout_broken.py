"""store.wait with a timeout too short for a slow peer (2 ranks).

Rank 0 pushes fresh weights to rank 1 and waits in the c10d store for rank 1's
"loaded" key with a 0.3 s timeout. Hard-coded short store waits were raised in
https://github.com/ai-dynamo/nixl/pull/1155 (tcp_store_group.wait 30 s -> 300 s)
and https://github.com/PrimeIntellect-ai/prime-diloco/pull/20 ("The previous
timeout was just 10 seconds"); cf. https://github.com/pytorch/pytorch/issues/67972.

Passes: ranks even. Rank 1 is already in dist.recv, gets the weights at once and
sets the key ~0.05 s later.
Fails: rank 1 held back >= 0.3 s before its dist.recv (rank 1's call 3;
init_process_group=1, barrier=2), or rank 1 slow by >= 0.3 s before every call:
rank 0's store.wait raises DistStoreError "wait timeout after 300ms".
"""

import datetime
import time

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _get_default_store

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
store = _get_default_store()
dist.barrier()
if rank == 0:
    req = dist.isend(torch.full((16,), 0.5), dst=1)
    # BUG: 0.3 s is shorter than the delay a healthy but slow peer can have
    store.wait(["weights_loaded_1"], datetime.timedelta(seconds=0.3))
    req.wait()
else:
    w = torch.empty(16)
    dist.recv(w, src=0)
    time.sleep(0.05)  # stands in for loading the weights into the model
    store.set("weights_loaded_1", "1")
    assert torch.all(w == 0.5)
dist.barrier()
dist.destroy_process_group()
