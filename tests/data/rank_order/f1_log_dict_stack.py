# case: log_dict_stack
# label: silent
# world: 3
# culprits: 2
# cause: all_reduce, line 39; order made at line 35
"""Per-class validation accuracy logged into a dict, then synced in one all_reduce.

Each rank walks its shard of a fixed validation list and adds a key to `logged` the
first time its shard meets a class, so the dict's insertion order follows the shard.
The values are then packed with torch.stack(list(logged.values())), summed with one
all_reduce and unpacked with zip(logged, ...). Ranks 0 and 1 meet "cat" first, rank 2
meets "dog" first, so position 0 adds rank 2's dog count into everyone's cat count.
Modelled on Lightning-AI/pytorch-lightning#20946 (sync_dist gives wrong averages when
self.log receives the key/value pairs in a different order on each rank):
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

    packed = torch.stack(list(logged.values()))
    dist.all_reduce(packed, op=dist.ReduceOp.SUM)
    synced = dict(zip(logged, packed.tolist()))

    expected = {c: float(sum(ok for k, ok in VAL if k == c)) for c in ("cat", "dog")}
    bad = {c: (synced[c], expected[c]) for c in expected if synced[c] != expected[c]}
    if bad:
        print(f"rank {rank}: WRONG per-class correct counts (got, expected): {bad}", flush=True)
    else:
        print(f"rank {rank}: OK {synced}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
