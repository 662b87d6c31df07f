# case: missing_sampled_metric_key
# class: missing_ranks
# names: missing_ranks
# world: 4
# culprits: 2
# cause: random.random, line 33
# nccl: yes
"""Each training step logs a dict of metrics and syncs every entry with all_reduce (like self.log(sync_dist=True)).
To save time the expensive grad-norm metric is logged only on a random 70% of steps, drawn from Python's random
module, which the script seeds with seed + rank. In step 0 rank 2 draws below the threshold and leaves grad_norm
out, so it issues one all_reduce fewer than ranks 0, 1 and 3; the following reductions pair up with the wrong
metrics, rank 2 finishes and leaves, and the other ranks are left waiting in their last all_reduce.
From: https://github.com/Lightning-AI/pytorch-lightning/issues/19106
"""
import datetime
import random

import torch
import torch.distributed as dist

SEED = 16


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    random.seed(SEED + rank)  # per-rank seed for augmentation diversity
    w = torch.ones(8)
    for step in range(3):
        x = torch.full((8,), float(rank + step))
        loss = ((w * x).sum() - 1.0) ** 2
        metrics = {"loss": loss.detach().reshape(1)}
        if random.random() >= 0.3:  # log the expensive metric on ~70% of steps
            metrics["grad_norm"] = (2 * x.norm() * loss.sqrt()).detach().reshape(1)
        for name, value in metrics.items():
            dist.all_reduce(value)
            value /= world
        print(f"rank {rank}: step {step} " + " ".join(f"{k}={v.item():.1f}" for k, v in metrics.items()), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
