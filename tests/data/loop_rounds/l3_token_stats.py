"""Corpus token-frequency statistics for vocabulary pruning.

Every worker counts token ids in its shard of the corpus. Counts are kept in
fixed-size vocabulary buckets and summed across workers bucket by bucket, so
that rank 0 can report which ids are rare enough to be pruned.
"""
import datetime

import torch
import torch.distributed as dist

VOCAB = 64
BUCKET = 16
NUM_SPECIAL = 4          # <pad>, <bos>, <eos>, <unk>
SHARD_TOKENS = 200


def read_shard(rank):
    g = torch.Generator().manual_seed(7 + rank)
    zipf = 1.0 / torch.arange(1, VOCAB + 1).float() ** 1.8
    return torch.multinomial(zipf, SHARD_TOKENS, replacement=True, generator=g)


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    tokens = read_shard(rank)

    counts = torch.zeros(VOCAB)
    seen_buckets = set()
    for tok in tokens.tolist():
        if tok >= NUM_SPECIAL:
            counts[tok] += 1
            seen_buckets.add(tok // BUCKET)

    for b in sorted(seen_buckets):
        chunk = counts[b * BUCKET:(b + 1) * BUCKET].clone()
        dist.all_reduce(chunk)
        counts[b * BUCKET:(b + 1) * BUCKET] = chunk

    if rank == 0:
        rare = [i for i in range(NUM_SPECIAL, VOCAB) if counts[i] < 2]
        print(f"{len(rare)} rare ids of {VOCAB - NUM_SPECIAL}: {rare}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
