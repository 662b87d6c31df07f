# case: p2p_isend_exit_unwaited
# fixed: rank 1 waits on the isend's Work (and destroys the process group) before its worker returns
# world: 2
# nccl: no
"""Rank 1 evaluates a shard and hands its result tensor to rank 0 with isend. It waits on the send's Work before
returning, so its process stays alive until rank 0 has received the tensor.
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
        work = dist.isend(result, 0)
        print("rank 1: result posted", flush=True)
        work.wait()
        dist.destroy_process_group()
        return
    other = torch.empty_like(result)
    dist.recv(other, 1)
    print(f"rank 0: total {(result.sum() + other.sum()).item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
