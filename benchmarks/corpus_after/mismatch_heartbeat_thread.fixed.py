# case: mismatch_heartbeat_thread
# fixed: the heartbeat thread all-reduces on its own process group, created by every rank up front
# world: 2
# nccl: yes
"""Once its data shard is loaded, each rank starts a heartbeat thread that all-reduces a
one-element "alive" tensor 1.3 s later (twice). Rank 1's shard loads 1 s later, so the heartbeats
are issued at different points of the training loop, but they go over a process group of their
own, so they are only ever paired with each other and never with a gradient all_reduce.
From: https://github.com/huggingface/transformers/pull/48382
"""
import datetime
import threading
import time

import torch
import torch.distributed as dist

SHARD_ROWS = [5_000, 105_000]


def heartbeat(beats, group):
    for _ in range(beats):
        time.sleep(1.3)
        alive = torch.ones(1)
        dist.all_reduce(alive, group=group)


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    hb_group = dist.new_group(backend="gloo")
    time.sleep(SHARD_ROWS[rank] * 1e-5)  # load this rank's shard
    beat = threading.Thread(target=heartbeat, args=(2, hb_group), daemon=True)
    beat.start()
    weights = torch.zeros(1000)
    dist.broadcast(weights, src=0)
    for step in range(12):
        time.sleep(0.2)  # forward + backward
        grad = torch.full((1000,), float(rank + 1))
        dist.all_reduce(grad)
        weights -= 0.01 * grad / world
    beat.join()
    print(f"rank {rank}: weights[0] = {weights[0].item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
