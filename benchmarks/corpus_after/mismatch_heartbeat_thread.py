# case: mismatch_heartbeat_thread
# class: mismatch/shape
# names: mismatch
# world: 2
# culprits: 0,1
# cause: dist.all_reduce, line 29
# nccl: yes
"""Once its data shard is loaded, each rank starts a heartbeat thread that all-reduces a
one-element "alive" tensor 1.3 s later (twice), on the default group - the group the training
loop uses for its 1000-element gradient all_reduce. Rank 1's shard loads 1 s later, so the two
heartbeats are issued at different points of the loop, and each rank's heartbeat is paired with
the other rank's gradient all_reduce: one call, two shapes.
From: https://github.com/huggingface/transformers/pull/48382
"""
import datetime
import threading
import time

import torch
import torch.distributed as dist

SHARD_ROWS = [5_000, 105_000]


def heartbeat(beats):
    for _ in range(beats):
        time.sleep(1.3)
        alive = torch.ones(1)
        dist.all_reduce(alive)


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    time.sleep(SHARD_ROWS[rank] * 1e-5)  # load this rank's shard
    beat = threading.Thread(target=heartbeat, args=(2,), daemon=True)
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
