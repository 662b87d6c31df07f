# case: timeout_ckpt_shard_owner
# class: timeout
# names: timeout
# world: 4
# culprits: 3
# cause: save_shard, line 43
# nccl: yes
"""A 4-rank data-parallel job checkpoints at step 2: parameters are handed out round-robin and
each rank writes the ones it owns to a slow remote store before training resumes. Parameter 3
is the embedding table, by far the largest, so its owner (rank 3) is still uploading for ~13 s
while ranks 0-2 are already waiting in the next gradient all_reduce and hit the 10 s timeout.
From: https://github.com/mosaicml/llm-foundry/pull/733
"""
import datetime
import io
import time

import torch
import torch.distributed as dist

SECONDS_PER_MB = 0.9  # throughput of the remote checkpoint store


def save_shard(tensors):
    buf = io.BytesIO()
    torch.save(tensors, buf)
    time.sleep(buf.tell() / 2**20 * SECONDS_PER_MB)  # upload buf to the remote store


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    params = [torch.randn(64, 64), torch.randn(64), torch.randn(64, 64),
              torch.randn(60_000, 64), torch.randn(64)]
    for step in range(4):
        for p in params:
            grad = torch.full_like(p, float(rank))
            dist.all_reduce(grad)
            p.sub_(0.01 * grad / world)
        if step == 2:
            mine = {f"p{i}": p for i, p in enumerate(params) if i % world == rank}
            save_shard(mine)
    print(f"rank {rank}: done, p0 sum {params[0].sum().item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
