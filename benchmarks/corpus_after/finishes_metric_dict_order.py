# case: finishes_metric_dict_order
# class: finishes
# names: mismatch
# world: 2
# culprits: 1
# cause: dist.all_reduce, line 34
# nccl: yes
"""Validation keeps per-class [count, loss-sum] rows in a dict that gains a key the first time a class shows up in
the rank's shard, then syncs them by stacking dict.values() and all-reducing the stack. Dict order is insertion
order, so it follows each rank's data: rank 0 meets cat, dog, bird, rank 1 meets dog, cat, bird. The all_reduce
adds rows by position, so cat is summed with dog; the run ends normally but the per-class counts it reports are
wrong (the script prints WRONG).
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

    table = torch.stack(list(stats.values()))
    dist.all_reduce(table)
    synced = dict(zip(stats.keys(), table))

    counts = {k: int(v[0].item()) for k, v in synced.items()}
    expected = {k: LABELS.count(k) for k in counts}
    verdict = "OK" if counts == expected else f"WRONG (expected {expected})"
    print(f"rank {rank}: per-class counts {counts} {verdict}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
