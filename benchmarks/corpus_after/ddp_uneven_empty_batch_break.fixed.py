# case: ddp_uneven_empty_batch_break
# fixed: train inside ddp_model.join(), which shadows the all-reduces for a rank that ran out early
# world: 3
# nccl: yes
"""Three DDP ranks train on batches of documents, dropping documents longer than MAX_LEN. Rank
1's third batch holds only long documents, so after filtering it is empty and the loop treats
that as the end of the shard (`break`). The loop runs under DDP's join() context manager, so
after rank 1 leaves it keeps answering the all-reduces of ranks 0 and 2 until they finish too.
From: https://github.com/NVIDIA-NeMo/Automodel/pull/2468
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

MAX_LEN = 16
# document lengths of each batch, per rank
LENGTHS = {
    0: [[5, 9, 12], [7, 3, 15], [11, 6, 8], [4, 14, 10], [9, 9, 2]],
    1: [[6, 13, 8], [10, 4, 12], [40, 27, 33], [5, 7, 16], [3, 11, 9]],
    2: [[8, 8, 14], [2, 16, 6], [12, 5, 9], [7, 10, 3], [15, 4, 6]],
}


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    ddp_model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    steps = 0
    with ddp_model.join():
        for lengths in LENGTHS[rank]:
            docs = [torch.randn(n, 8, generator=gen) for n in lengths if n <= MAX_LEN]
            if not docs:
                break  # an empty batch means the shard is exhausted
            x = torch.stack([d.mean(dim=0) for d in docs])
            loss = ddp_model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
    dist.barrier()
    print(f"rank {rank}: trained {steps} steps")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
