# case: mismatch_dtype_index_int32
# fixed: both code paths return int64 lengths (the cached int32 index is converted with .long())
# world: 4
# nccl: yes
"""Before bucketing by length, every rank all-gathers the sequence lengths of its data shard. Whether the lengths
come from the int32 index or from counting the raw sequences, they are returned as int64, so all ranks gather the
same dtype. From: https://github.com/linjieli222/HERO/issues/38"""
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
        return torch.from_numpy(cached).long()
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
