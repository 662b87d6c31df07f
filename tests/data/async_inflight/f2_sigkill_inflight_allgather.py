"""f2: 3 ranks. Pattern: a worker is killed by the Linux OOM killer (SIGKILL,
torchrun reports exitcode -9) mid-step while an async all_gather of embeddings
(contrastive-loss style) is in flight. Cf. DeepSpeed issue #4890
(https://github.com/deepspeedai/DeepSpeed/issues/4890, "exits with return code = -9").
Culprit: rank 2 dies by SIGKILL (os.kill, line 23) at step 2 while its async
all_gather (line 20) is in flight, not yet waited.
Faulty op: all_gather, line 20.
"""
import datetime, os, signal
import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)
hoard = []
for step in range(5):
    emb = torch.randn(32, 64)
    outs = [torch.empty_like(emb) for _ in range(world)]
    work = dist.all_gather(outs, emb, async_op=True)
    hoard.append(torch.randn(1000, 100))   # memory keeps growing on rank 2...
    if rank == 2 and step == 2:
        os.kill(os.getpid(), signal.SIGKILL)   # ...until the OOM killer fires
    work.wait()
    logits = emb @ torch.cat(outs).T
    loss = torch.nn.functional.cross_entropy(logits, torch.arange(32) + 32 * rank)
dist.destroy_process_group()
print(f"rank {rank} done")
