# case: broadcast_root
# world: 4
# culprits: 0
# waiting: 3
# call: init_process_group
"""Broadcast root sends and leaves.

gloo broadcast is a tree: root 0 sends directly to some ranks only, and rank 3
gets the data relayed by rank 2. Root 0 can finish its sends and destroy its
group while rank 3 is still connecting to rank 0 in init_process_group.
Modelled on https://github.com/pytorch/pytorch/issues/75512 (sender finishes
and exits, peer fails with pair.cc "Connection closed by peer") and
https://github.com/mosaicml/streaming/pull/186 (synchronize before destroying
the process group).
"""
import datetime

import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    t = torch.arange(16, dtype=torch.float32) if rank == 0 else torch.zeros(16)
    dist.broadcast(t, src=0)
    if rank == 0:
        print(f"rank {rank}: broadcast sent OK", flush=True)
        dist.destroy_process_group()
        return
    print(f"rank {rank}: got sum {float(t.sum())} OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
