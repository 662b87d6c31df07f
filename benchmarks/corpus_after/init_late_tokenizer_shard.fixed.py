# case: init_late_tokenizer_shard
# fixed: split the documents evenly over the ranks instead of one uneven corpus file per rank
# world: 3
# nccl: yes
"""Each rank builds the vocabulary of its share of the corpus before joining the process group.
The documents of all files are split evenly over the ranks, so every rank finishes tokenizing
at about the same time and all reach init_process_group well inside the group timeout.
From: https://github.com/alibaba/graphlearn-for-pytorch/pull/102
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

# documents per corpus file; the files are assigned one per rank
FILE_DOCS = [20_000, 140_000, 20_000]


def build_vocab(n_docs):
    vocab = {}
    for start in range(0, n_docs, 1000):
        time.sleep(0.1)  # stands in for tokenizing 1000 documents
        vocab[f"tok{start}"] = len(vocab)
    return vocab


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    n_docs = sum(FILE_DOCS) // world
    vocab = build_vocab(n_docs)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    size = torch.tensor([float(len(vocab))])
    dist.all_reduce(size)
    print(f"rank {rank}/{world}: total vocab entries {int(size.item())}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
