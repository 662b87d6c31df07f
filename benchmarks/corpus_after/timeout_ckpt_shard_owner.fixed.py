# case: timeout_ckpt_shard_owner
# fixed: upload the checkpoint shard from a background thread so its owner keeps training
# world: 4
# nccl: yes
"""A 4-rank data-parallel job checkpoints at step 2: parameters are handed out round-robin and
each rank writes the ones it owns to a slow remote store before training resumes. Parameter 3
is the embedding table, by far the largest; the upload runs in a background thread on a copy of
the shard, so rank 3 rejoins the gradient all_reduce at once and only joins the thread at the end.
From: https://github.com/mosaicml/llm-foundry/pull/733
"""
import datetime
import io
import threading
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
    uploads = []
    for step in range(4):
        for p in params:
            grad = torch.full_like(p, float(rank))
            dist.all_reduce(grad)
            p.sub_(0.01 * grad / world)
        if step == 2:
            mine = {f"p{i}": p.clone() for i, p in enumerate(params) if i % world == rank}
            uploads.append(threading.Thread(target=save_shard, args=(mine,)))
            uploads[-1].start()
    for t in uploads:
        t.join()
    print(f"rank {rank}: done, p0 sum {params[0].sum().item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
