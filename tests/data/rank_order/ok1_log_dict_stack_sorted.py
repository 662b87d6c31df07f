# case: log_dict_stack_sorted
# label: ok
# world: 3
# culprits: none
# cause: none (correct twin of f1_log_dict_stack.py: keys sorted before packing)
"""Correct twin of f1_log_dict_stack.py: per-class accuracy synced in one all_reduce.

Each rank still adds a key to `logged` the first time its shard meets a class, so the
dict's insertion order still follows the shard, but the values are packed and
unpacked in sorted(logged) order, which is the same on every rank, so each position
of the all_reduce holds the same class everywhere.
The fix for the pattern in Lightning-AI/pytorch-lightning#20946:
https://github.com/Lightning-AI/pytorch-lightning/issues/20946
"""
import datetime

import torch
import torch.distributed as dist

# (class, correct) for 12 validation samples; rank r gets samples r, r+3, r+6, r+9
VAL = [("cat", 1), ("cat", 1), ("dog", 0), ("dog", 1), ("cat", 0), ("dog", 1),
       ("cat", 1), ("dog", 1), ("cat", 1), ("dog", 0), ("cat", 1), ("dog", 1)]


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    shard = VAL[rank::world]

    logged = {}  # class -> number of correct predictions on this rank
    for cls, correct in shard:
        if cls not in logged:
            logged[cls] = torch.tensor(0.0)
        logged[cls] += correct

    names = sorted(logged)  # same order on every rank
    packed = torch.stack([logged[c] for c in names])
    dist.all_reduce(packed, op=dist.ReduceOp.SUM)
    synced = dict(zip(names, packed.tolist()))

    expected = {c: float(sum(ok for k, ok in VAL if k == c)) for c in ("cat", "dog")}
    bad = {c: (synced[c], expected[c]) for c in expected if synced[c] != expected[c]}
    if bad:
        print(f"rank {rank}: WRONG per-class correct counts (got, expected): {bad}", flush=True)
    else:
        print(f"rank {rank}: OK {synced}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
