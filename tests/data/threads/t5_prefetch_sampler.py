# Prefetching sampler: a background thread prepares the next epoch's shuffled
# index list on rank 0 and broadcasts it, so epoch boundaries do not stall.
import datetime
import queue
import threading
import time

import torch
import torch.distributed as dist

DATASET_LEN, EPOCHS, STEPS = 4096, 3, 4


def prefetch_epochs(q, rank):
    for epoch in range(EPOCHS):
        perm = torch.empty(DATASET_LEN, dtype=torch.int64)
        if rank == 0:
            time.sleep(0.2)  # read the index file and shuffle it
            perm = torch.randperm(DATASET_LEN, generator=torch.Generator().manual_seed(epoch))
        dist.broadcast(perm, src=0)  # everyone uses rank 0's order
        q.put(perm)


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(DATASET_LEN, 64)
    q = queue.Queue(maxsize=2)
    model(data[:1]).sum().backward()  # warm-up: a first backward loads autograd's kernels (~1 s on a CUDA build)
    threading.Thread(target=prefetch_epochs, args=(q, rank), daemon=True).start()
    for epoch in range(EPOCHS):
        perm = q.get()
        shard = perm[rank::world]
        for step in range(STEPS):
            time.sleep(0.05)  # collate the batch
            batch = data[shard[step * 32:(step + 1) * 32]]
            loss = model(batch).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            dist.all_reduce(model.weight.grad)
            dist.all_reduce(model.bias.grad)
            opt.step()
        if rank == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
