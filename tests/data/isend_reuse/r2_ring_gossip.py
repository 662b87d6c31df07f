"""Decentralized (gossip) averaging on a ring.

Every rank holds a parameter vector.  In each gossip round a rank sends its
vector to its right neighbour, receives the vector of its left neighbour and
replaces its own vector by the average of the two.  Rank 0 also writes a
checkpoint before the round, so it joins the exchange a little later.  Every
rank checks that the neighbour vector it received is the neighbour's value at
the start of the round.
"""
import datetime
import time

import torch
import torch.distributed as dist

DIM = 1024


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % world, (rank - 1) % world

    params = torch.full((DIM,), float(rank + 1))
    if rank == 0:
        time.sleep(0.5)   # write checkpoint before the gossip round
    left_params = torch.empty(DIM)

    send_req = dist.isend(params, dst=right)
    recv_req = dist.irecv(left_params, src=left)
    recv_req.wait()
    params.add_(left_params).mul_(0.5)   # gossip average with the left neighbour
    send_req.wait()

    expected_left = float(left + 1)
    if not torch.all(left_params == expected_left):
        print(f"WRONG: rank {rank} got {left_params[0].item()} from rank {left}, "
              f"expected {expected_left}", flush=True)
        raise SystemExit(1)
    print(f"rank {rank}: averaged with rank {left}, now {params[0].item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
