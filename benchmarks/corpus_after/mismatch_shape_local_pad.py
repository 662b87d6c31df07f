# case: mismatch_shape_local_pad
# class: mismatch/shape
# names: mismatch
# world: 3
# culprits: 2
# cause: dist.all_gather, line 42
# nccl: yes
"""Evaluation gathers the predicted token ids of every rank for scoring. The collate step pads each batch to the
longest sequence IN THAT BATCH, and the gather allocates its receive slots with empty_like of the local tensor,
assuming every rank's padded batch has the same shape. Ranks 0 and 1 pad to length 4; rank 2's batch contains a
6-token sequence, so it enters all_gather with a (2, 6) tensor against (2, 4) slots and gloo aborts a rank that
receives its larger buffer. Padding must be to the maximum across ranks (accelerate's pad_across_processes). From:
https://github.com/huggingface/accelerate/issues/167 (and accelerate#19)"""
import datetime

import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=10)
PAD = -100
PREDICTIONS = {
    0: [[5, 8, 2], [7, 1, 1, 4]],
    1: [[3, 3, 9, 9], [2]],
    2: [[4, 6], [1, 2, 3, 4, 5, 6]],
}


def pad_batch(seqs, length):
    out = torch.full((len(seqs), length), PAD, dtype=torch.int64)
    for i, seq in enumerate(seqs):
        out[i, : len(seq)] = torch.tensor(seq)
    return out


def main():
    dist.init_process_group("gloo", timeout=TIMEOUT)
    rank = dist.get_rank()
    seqs = PREDICTIONS[rank]
    pad_to = max(len(s) for s in seqs)
    batch = pad_batch(seqs, pad_to)
    gathered = [torch.empty_like(batch) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, batch)
    n_tokens = int((torch.cat(gathered) != PAD).sum())
    assert n_tokens == 20, f"rank {rank}: {n_tokens} tokens gathered"
    print(f"rank {rank}: scored {n_tokens} tokens", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
