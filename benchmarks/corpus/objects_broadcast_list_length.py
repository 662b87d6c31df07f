# case: objects_broadcast_list_length
# class: objects
# names: mismatch
# world: 3
# culprits: 0
# cause: broadcast_object_list, line 31
# nccl: no
"""Resuming from a checkpoint, rank 0 broadcasts the epoch, the step and, since the checkpoint has one, the sampler
state, while the other ranks pass a list of two: the ranks' lists differ in length."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")


def load_checkpoint():
    return {"epoch": 3, "step": 1200, "sampler": {"seed": 17, "offset": 384}}


resume = [None, None]  # epoch, step
if rank == 0:
    checkpoint = load_checkpoint()
    resume = [checkpoint["epoch"], checkpoint["step"]]
    if "sampler" in checkpoint:
        resume.append(checkpoint["sampler"])

dist.broadcast_object_list(resume, src=0)
epoch, step = resume[0], resume[1]
print(f"rank {rank}: resuming at epoch {epoch}, step {step}")
dist.destroy_process_group()
