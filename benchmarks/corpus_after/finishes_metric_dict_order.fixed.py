# case: finishes_metric_dict_order
# fixed: the per-class rows are stacked in one fixed class order (sorted names) instead of each rank's insertion order
# world: 2
# nccl: yes
"""Validation keeps per-class [count, loss-sum] rows in a dict that gains a key the first time a class shows up in
the rank's shard, then syncs them by stacking the rows and all-reducing the stack. The rows are stacked in sorted
class order, the same on every rank, so the positional all_reduce adds like to like.
From: https://github.com/Lightning-AI/pytorch-lightning/issues/20946
"""
import datetime

import torch
import torch.distributed as dist

LABELS = ["cat", "dog", "dog", "cat", "bird", "bird", "cat", "dog", "cat", "dog", "bird", "cat"]


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    stats = {}
    for i in range(rank, len(LABELS), world):  # this rank's shard
        label = LABELS[i]
        loss = 0.1 * (i + 1)
        row = stats.setdefault(label, torch.zeros(2))
        row += torch.tensor([1.0, loss])

    keys = sorted(stats)  # same order on every rank
    table = torch.stack([stats[k] for k in keys])
    dist.all_reduce(table)
    synced = dict(zip(keys, table))

    counts = {k: int(v[0].item()) for k, v in synced.items()}
    expected = {k: LABELS.count(k) for k in counts}
    verdict = "OK" if counts == expected else f"WRONG (expected {expected})"
    print(f"rank {rank}: per-class counts {counts} {verdict}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
