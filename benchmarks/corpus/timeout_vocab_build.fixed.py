# case: timeout_vocab_build
# fixed: the group timeout (30 s) covers the vocabulary build
# world: 2
# nccl: yes
"""Rank 0 builds the vocabulary (8 s here, minutes on a real corpus) and broadcasts its size; the group timeout is
longer than the build, so rank 1 waits for it in the broadcast."""
import datetime
import time

import torch
import torch.distributed as dist

# short enough that a hang fails fast, longer than the slowest step that the other ranks wait for
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=30))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")


def build_vocab():
    text = "the quick brown fox jumps over the lazy dog " * 1000
    vocab = sorted(set(text.split()))
    time.sleep(8)  # stands in for tokenizing the whole training corpus
    return vocab


vocab_size = torch.zeros(1, dtype=torch.int64, device=device)
if rank == 0:
    vocab_size[0] = len(build_vocab())
dist.broadcast(vocab_size, src=0)
embedding = torch.nn.Embedding(int(vocab_size.item()), 16).to(device)
print(f"rank {rank}: embedding for {embedding.num_embeddings} words")
dist.destroy_process_group()
