# case: p2p_ring_send_first
# fixed: the send and the recv are posted together (isend + irecv, then wait on both) instead of a blocking send first
# world: 3
# nccl: yes
"""Ring halo exchange: every rank sends its 16 MB boundary slab to the next rank and receives the previous rank's
slab. Both operations are posted before either is waited on, so each send finds its matching recv already posted.
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
        works = [dist.isend(boundary, right), dist.irecv(halo, left)]
        for w in works:
            w.wait()
        assert halo[0].item() == left + step * world, (step, halo[0].item())
        boundary += world

    print(f"rank {rank}: halo from {left} ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
