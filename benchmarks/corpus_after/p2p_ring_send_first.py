# case: p2p_ring_send_first
# class: p2p/cycle
# names: p2p_cycle
# world: 3
# culprits: 0,1,2
# cause: dist.send, line 29
# nccl: yes
"""Ring halo exchange: every rank sends its 16 MB boundary slab to the next rank with a blocking send and only then
receives the previous rank's slab. A blocking send of a large tensor completes only once the peer has posted the
matching recv, and every rank is still inside its own send, so the three sends wait on each other in a cycle
until the timeout ends the run.
From: https://github.com/pytorch/pytorch/pull/11275
"""
import datetime

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % world, (rank - 1) % world
    n = 4 * 1024 * 1024  # 16 MB of float32: far beyond any transport's eager buffer

    boundary = torch.full((n,), float(rank))
    halo = torch.empty(n)
    for step in range(2):
        dist.send(boundary, right)
        dist.recv(halo, left)
        assert halo[0].item() == left + step * world, (step, halo[0].item())
        boundary += world

    print(f"rank {rank}: halo from {left} ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
