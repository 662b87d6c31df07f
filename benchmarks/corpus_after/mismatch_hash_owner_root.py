# case: mismatch_hash_owner_root
# class: mismatch/root
# names: mismatch
# world: 4
# culprits: 0,1,2,3
# cause: dist.broadcast, line 32
# nccl: yes
"""A ZeRO-1 style optimizer gives each parameter an owner rank, owner = hash(name) % world_size; the owner applies
the update and then broadcasts the parameter from itself. Python's hash() of a str is salted per process, and
torchrun starts every rank with its own salt, so the ranks disagree about the owners and meet in the same
broadcast with different src ranks: some ranks take data from the wrong rank, others wait for a root that never
sends, and the run hangs until the timeout (or, if the broadcasts happen to complete, the final check fails).
From: https://github.com/pytorch/pytorch/pull/153734
"""
import datetime

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    names = [f"layers.{i}.{kind}" for i in range(3) for kind in ("weight", "bias")]
    params = {n: torch.zeros(4096) for n in names}
    owner = {n: hash(n) % world for n in names}
    print(f"rank {rank}: owners {[owner[n] for n in names]}", flush=True)

    for n in names:
        if owner[n] == rank:
            params[n] += 1.0 + names.index(n)  # the owner's optimizer step
        dist.broadcast(params[n], src=owner[n])

    flat = torch.stack([params[n][0] for n in names])
    views = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(views, flat)
    assert all(torch.equal(v, views[0]) for v in views), "parameters differ across ranks"
    print(f"rank {rank}: parameters in sync", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
