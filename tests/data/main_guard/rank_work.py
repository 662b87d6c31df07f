"""Helper module (not a script) used by guarded_imported_fn.py: it only
defines a rank function and never calls launch()."""
import torch
import torch.distributed as dist


def reduce_to_root(value):
    rank = dist.get_rank()
    world = dist.get_world_size()
    t = torch.tensor([float(value)])
    dist.reduce(t, dst=0)
    if rank == 0:
        assert t.item() == float(value) * world, t.item()
    dist.barrier()
