# case: mismatch_shape_local_pad
# fixed: the pad length is the maximum across ranks (all_reduce MAX of the local maximum) before all_gather
# world: 3
# nccl: yes
"""Evaluation gathers the predicted token ids of every rank for scoring. Each rank pads its batch to the longest
sequence across ALL ranks (found with an all_reduce MAX first), so every rank's padded tensor has the same shape.
From: https://github.com/huggingface/accelerate/issues/167"""
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
    pad_to = torch.tensor([max(len(s) for s in seqs)])
    dist.all_reduce(pad_to, op=dist.ReduceOp.MAX)
    batch = pad_batch(seqs, int(pad_to))
    gathered = [torch.empty_like(batch) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, batch)
    n_tokens = int((torch.cat(gathered) != PAD).sum())
    assert n_tokens == 20, f"rank {rank}: {n_tokens} tokens gathered"
    print(f"rank {rank}: scored {n_tokens} tokens", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
