# case: mismatch_dtype_index_int32
# class: mismatch/dtype
# names: mismatch
# world: 4
# culprits: 2
# cause: dist.all_gather, line 37
# nccl: yes
"""Before bucketing by length, every rank all-gathers the sequence lengths of its data shard. Lengths come from a
prebuilt index stored as int32 numpy arrays; a shard whose index is missing (shard 2 here) falls back to counting
the raw sequences with torch.tensor(list), which gives int64. Rank 2 therefore enters all_gather with an int64 tensor
while ranks 0, 1 and 3 expect int32 slots, and gloo aborts a rank that receives rank 2's 8-byte elements. From:
https://github.com/linjieli222/HERO/issues/38 ("Mismatched data types: One rank had type int64, but another rank
had type uint8"; see also pytorch/pytorch#150433)"""
import datetime

import numpy as np
import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=10)
RAW_SHARDS = {r: [list(range(5 + r + k)) for k in range(3)] for r in range(4)}
LENGTH_INDEX = {r: np.array([len(s) for s in RAW_SHARDS[r]], dtype=np.int32) for r in (0, 1, 3)}


def shard_lengths(rank):
    cached = LENGTH_INDEX.get(rank)
    if cached is not None:
        return torch.from_numpy(cached)
    return torch.tensor([len(seq) for seq in RAW_SHARDS[rank]])


def main():
    dist.init_process_group("gloo", timeout=TIMEOUT)
    rank = dist.get_rank()
    lengths = shard_lengths(rank)
    gathered = [torch.empty_like(lengths) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, lengths)
    longest = int(torch.cat(gathered).max())
    assert longest == 10, f"rank {rank}: longest sequence {longest}"
    print(f"rank {rank}: bucket boundary {longest}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
