"""A ring exchange with batch_isend_irecv in a long loop (4 ranks), as a
hand-written ring all-reduce or a pipeline's neighbour exchange does it.

Stresses: every rank sends to its right neighbour and receives from its left
in one batch_isend_irecv, then waits on the batch; all ranks are in
point-to-point calls at once, a ring of sends and receives that is NOT a
deadlock (the sends are non-blocking and every receive is posted). A ring
all-reduce of a small vector (world-1 steps of the pass) is checked against
dist.all_reduce every 20 iterations.
"""
# ranks: 4
import os

import torch
import torch.distributed as dist

STEPS = 150


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    right = (rank + 1) % world
    left = (rank - 1) % world
    for i in range(STEPS):
        # pass a value around the ring world-1 times, summing what arrives
        acc = torch.tensor([float(rank * 7 + i)])
        cur = acc.clone()
        for _ in range(world - 1):
            inc = torch.zeros(1)
            ops = [dist.P2POp(dist.isend, cur, right), dist.P2POp(dist.irecv, inc, left)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
            acc += inc
            cur = inc
        want = float(sum(r * 7 + i for r in range(world)))
        if acc.item() != want:
            raise RuntimeError(f"step {i}: ring sum {acc.item()} != {want}")
        if i % 20 == 0:
            ref = torch.tensor([float(rank * 7 + i)])
            dist.all_reduce(ref)
            if ref.item() != acc.item():
                raise RuntimeError(f"step {i}: all_reduce {ref.item()} != ring {acc.item()}")
    print(f"rank {rank}: {STEPS} ring passes ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
