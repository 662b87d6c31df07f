"""Hybrid sparse/dense recommendation model step on 4 workers.

The embedding table is sharded over pairs of workers (shard groups [0,1] and
[2,3]): each worker pools its ids in its local shard and the pair all-gathers
the pooled embeddings.  The dense tower is replicated and its gradients are
all-reduced over the whole world.  To overlap communication each worker
issues whichever collective is ready first: a worker with a heavy sparse batch
finishes its dense backward before its embedding lookups are done.
"""
import datetime

import torch
import torch.distributed as dist

# ids per sample of each worker's sparse feature (from the day's feature log)
FEATURE_LENGTHS = [[3, 2, 4, 1], [2, 2, 3, 3], [9, 12, 7, 10], [1, 4, 2, 3]]
HEAVY_LOOKUP_IDS = 24
ROWS_PER_SHARD, DIM, STEPS = 100, 8, 3


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    shard_groups = [dist.new_group([0, 1], timeout=datetime.timedelta(seconds=10)),
                    dist.new_group([2, 3], timeout=datetime.timedelta(seconds=10))]
    shard_group = shard_groups[rank // 2]

    torch.manual_seed(rank)
    table = torch.nn.EmbeddingBag(ROWS_PER_SHARD, DIM, mode="sum")
    torch.manual_seed(0)
    dense = torch.nn.Sequential(torch.nn.Linear(4, DIM), torch.nn.ReLU(), torch.nn.Linear(DIM, 1))
    opt = torch.optim.SGD(dense.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)

    for step in range(STEPS):
        lengths = torch.tensor(FEATURE_LENGTHS[rank])
        ids = torch.randint(0, ROWS_PER_SHARD, (int(lengths.sum()),), generator=gen)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
        dense_x = torch.randn(len(lengths), 4, generator=gen)

        opt.zero_grad()
        loss = dense(dense_x).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            pooled = table(ids, offsets)

        def exchange_embeddings():
            out = [torch.zeros_like(pooled) for _ in range(2)]
            dist.all_gather(out, pooled, group=shard_group)
            return torch.cat(out)

        def reduce_dense():
            for p in dense.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world

        if len(ids) > HEAVY_LOOKUP_IDS:
            reduce_dense()
            emb = exchange_embeddings()
        else:
            emb = exchange_embeddings()
            reduce_dense()
        opt.step()
        if rank == 0:
            print(f"step {step} dense loss {loss.item():.4f} pooled {tuple(emb.shape)}")

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
