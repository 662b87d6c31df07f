"""A learner's attempts at fixing gather-uneven, as `Lab.check` receives them: one right, one that hangs, one that
computes a wrong value. Importable, so the ranks reach them by name (a function typed into a notebook cell travels
by value instead)."""
import datetime

import torch
import torch.distributed as dist

from sandbox.bugs.gather_uneven import items


def _init():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    return dist.get_rank(), dist.get_world_size()


def _padded_gather():
    """Every rank's items, padded to the longest, and every rank's real length."""
    rank, world = _init()
    mine = items(rank)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([len(mine)]))
    longest = max(int(s) for s in sizes)
    padded = torch.zeros(longest)
    padded[:len(mine)] = mine
    out = [torch.empty(longest) for _ in range(world)]
    dist.all_gather(out, padded)
    dist.destroy_process_group()
    return out, sizes


def right():
    out, sizes = _padded_gather()
    return [t[:int(n)].tolist() for t, n in zip(out, sizes)]


def hangs():
    """Sizes passed around a ring, every rank receiving before it sends: nobody ever sends."""
    rank, world = _init()
    mine = items(rank)
    size = torch.zeros(1, dtype=torch.int64)
    dist.recv(size, src=(rank - 1) % world)  # WRONG: every rank waits here first
    dist.send(torch.tensor([len(mine)]), dst=(rank + 1) % world)
    return []


def wrong_value():
    """Padded to the longest, then never cut back to each rank's real length."""
    out, _ = _padded_gather()
    return [t.tolist() for t in out]  # WRONG: the padding stays


def raises():
    """Rank 1 refuses before the first collective; the others wait for it in all_gather."""
    rank, world = _init()
    if rank == 1:
        raise ValueError("rank 1 has no sizes to share")
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([rank + 2]))
    return []
