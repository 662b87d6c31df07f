"""f3: 3 ranks. Pattern: periodic parameter sync with an async broadcast from
rank 0 overlapped with data loading; a native crash (SIGSEGV in a C extension,
e.g. a data-loading/decoding library) kills rank 0 mid-step.
Culprit: rank 0 dies by SIGSEGV (os.kill, line 22) at step 2 while its async
broadcast (line 19) is in flight, not yet waited.
Faulty op: broadcast, line 19.
"""
import datetime, os, signal
import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
torch.manual_seed(rank)
params = torch.randn(4096)
for step in range(5):
    if rank == 0:
        params += 0.01 * torch.randn(4096)   # rank 0 owns the master copy
    work = dist.broadcast(params, src=0, async_op=True)
    batch = torch.randn(64, 4096)             # "data loading" overlapped
    if rank == 0 and step == 2:
        os.kill(os.getpid(), signal.SIGSEGV)  # native crash in the loader
    work.wait()
    out = batch @ params
    dist.all_reduce(out)
dist.destroy_process_group()
print(f"rank {rank} done")
