# case: missing_sampled_metric_key
# fixed: the log-this-step draw comes from a generator seeded identically on every rank, so all ranks log the same keys
# world: 4
# nccl: yes
"""Each training step logs a dict of metrics and syncs every entry with all_reduce (like self.log(sync_dist=True)).
The expensive grad-norm metric is logged only on a random 70% of steps; that draw comes from a generator seeded the
same on every rank (per-rank seeding is kept for everything else), so all ranks log the same keys in every step.
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
    log_rng = random.Random(SEED)  # same stream on every rank
    w = torch.ones(8)
    for step in range(3):
        x = torch.full((8,), float(rank + step))
        loss = ((w * x).sum() - 1.0) ** 2
        metrics = {"loss": loss.detach().reshape(1)}
        if log_rng.random() >= 0.3:  # log the expensive metric on ~70% of steps
            metrics["grad_norm"] = (2 * x.norm() * loss.sqrt()).detach().reshape(1)
        for name, value in metrics.items():
            dist.all_reduce(value)
            value /= world
        print(f"rank {rank}: step {step} " + " ".join(f"{k}={v.item():.1f}" for k, v in metrics.items()), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
