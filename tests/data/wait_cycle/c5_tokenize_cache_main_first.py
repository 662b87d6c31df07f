"""Data preparation and a short training run on 3 workers.

Rank 0 tokenizes the raw corpus once and writes a cache file that the other
workers then read (the usual "main process first" pattern).  The workers that
own a validation line need the same shuffled validation split, which rank 0
draws and broadcasts to them over the evaluation group.
"""
import datetime
import os
import tempfile

import torch
import torch.distributed as dist

CORPUS = ["the cat sat on the mat", "a dog barked at the cat", "the mat was red",
          "a bird sat on a wire", "the dog slept", "a cat chased the bird",
          "the wire was cold", "a red bird sang", "the cat slept on the wire"]
VAL_FRACTION = 0.25
RUN = os.environ.get("TORCHELASTIC_RUN_ID", "local")
CACHE = os.path.join(tempfile.gettempdir(), f"tok_cache_{RUN}.pt")


def build_cache(path):
    vocab = sorted({w for line in CORPUS for w in line.split()})
    ids = [torch.tensor([vocab.index(w) for w in line.split()]) for line in CORPUS]
    torch.save({"vocab": vocab, "ids": ids}, path)


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    is_main = rank == 0
    n_val = max(1, int(len(CORPUS) * VAL_FRACTION))
    val_ranks = list(range(min(world, n_val)))  # one validation line per worker
    eval_group = dist.new_group(val_ranks, timeout=datetime.timedelta(seconds=10))

    if is_main:
        build_cache(CACHE)
        dist.barrier()  # cache is on disk: release the other workers
    if rank in val_ranks:
        split = torch.randperm(len(CORPUS)) if is_main else torch.empty(len(CORPUS), dtype=torch.long)
        dist.broadcast(split, src=0, group=eval_group)
        val_line = int(split[rank])
    if not is_main:
        dist.barrier()  # wait until rank 0 has written the cache
    data = torch.load(CACHE)

    torch.manual_seed(0)
    model = torch.nn.EmbeddingBag(len(data["vocab"]), 1, mode="mean")
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for i, line in enumerate(data["ids"][rank::world]):
        opt.zero_grad()
        loss = (model(line.unsqueeze(0)) - len(line) / 10).pow(2).mean()
        loss.backward()
        dist.all_reduce(model.weight.grad)
        opt.step()
    if rank in val_ranks:
        val = data["ids"][val_line]
        print(f"rank {rank} val loss {(model(val.unsqueeze(0)) - len(val) / 10).pow(2).item():.4f}")
    dist.barrier()
    if is_main:
        os.remove(CACHE)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
