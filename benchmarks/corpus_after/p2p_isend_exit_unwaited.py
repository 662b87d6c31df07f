# case: p2p_isend_exit_unwaited
# class: p2p/unwaited
# names: unwaited
# world: 2
# culprits: 1
# cause: dist.isend, line 33
# nccl: no
"""Rank 1 evaluates a shard and hands its result tensor to rank 0 with isend, then returns from its worker and the
process exits without ever waiting on the send. Rank 0 is still finishing its own shard when it posts the matching
recv; by then the sender's process, and with it the gloo connection, is gone, so rank 0's recv fails with
"Connection closed by peer" although rank 1 exited cleanly.
From: https://github.com/pytorch/pytorch/issues/78514
"""
import datetime

import torch
import torch.distributed as dist


def evaluate(rank, n=2_000_000):
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(n, generator=g)
    for _ in range(3 if rank == 1 else 60):  # rank 0 also reduces its own, larger shard
        x = torch.sin(x) + 0.5 * x
    return x


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    result = evaluate(rank)
    if rank == 1:
        dist.isend(result, 0)
        print("rank 1: result posted", flush=True)
        return
    other = torch.empty_like(result)
    dist.recv(other, 1)
    print(f"rank 0: total {(result.sum() + other.sum()).item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
