# case: init_late_tokenizer_shard
# class: init
# names: init
# world: 3
# culprits: 1
# cause: build_vocab, line 37
# nccl: yes
"""Each rank builds the vocabulary of its own corpus file before joining the process group.
The corpus is split one file per rank, and file 1 is seven times bigger than the others, so
rank 1 is still tokenizing when ranks 0 and 2 reach init_process_group and wait for it past
the 10 s group timeout; they fail in init while rank 1 is not even there yet.
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
    n_docs = FILE_DOCS[rank]
    vocab = build_vocab(n_docs)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    size = torch.tensor([float(len(vocab))])
    dist.all_reduce(size)
    print(f"rank {rank}/{world}: total vocab entries {int(size.item())}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
