"""Small regression trainer for a cluster of heterogeneous workers.

Each worker fits a linear model on its own stream of synthetic samples; the
per-worker batch size comes from the cluster plan (bigger boxes take bigger
batches).  Gradients are averaged over the default group, and the per-worker
loss / throughput stats are gathered on a separate stats group so that the
logging traffic does not queue behind the gradient all-reduces.
"""
import datetime
import time

import torch
import torch.distributed as dist

CLUSTER_PLAN = {
    "batch_sizes": [16, 48],   # per worker, indexed by rank
    "stats_first_above": 32,   # big batches have their loss stats ready before backward ends
    "steps": 5,
    "lr": 0.05,
}


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    stats_group = dist.new_group(list(range(world)), timeout=datetime.timedelta(seconds=10))

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=CLUSTER_PLAN["lr"])
    bsz = CLUSTER_PLAN["batch_sizes"][rank]
    gen = torch.Generator().manual_seed(100 + rank)

    def reduce_grads():
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world

    def gather_stats(loss, t0):
        mine = torch.tensor([loss.item(), bsz / (time.time() - t0)])
        everyone = [torch.zeros(2) for _ in range(world)]
        dist.all_gather(everyone, mine, group=stats_group)
        return torch.stack(everyone)

    for step in range(CLUSTER_PLAN["steps"]):
        t0 = time.time()
        x = torch.randn(bsz, 8, generator=gen)
        y = x.sum(dim=1, keepdim=True)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        # overlap: issue whichever communication is ready first
        if bsz > CLUSTER_PLAN["stats_first_above"]:
            stats = gather_stats(loss, t0)
            reduce_grads()
        else:
            reduce_grads()
            stats = gather_stats(loss, t0)
        opt.step()
        if rank == 0:
            print(f"step {step} loss {stats[:, 0].mean():.4f} samples/s {stats[:, 1].sum():.0f}")

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
