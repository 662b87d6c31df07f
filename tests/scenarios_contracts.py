"""Rank programs that finish (verdict ok) yet break a contract of torch.distributed, one per warning kind, and a
long correct data-parallel loop that breaks none. Each is what a user's code could look like."""
import datetime

import torch
import torch.distributed as dist


def _init():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    return dist.get_rank(), dist.get_world_size()


def reduce_ops_differ():
    """gloo completes an all_reduce whose reduce op differs across ranks: each rank reduces its own way."""
    rank, _ = _init()
    t = torch.tensor([float(rank + 1)])
    for _ in range(3):  # one warning for the loop, not three
        dist.all_reduce(t, op=dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX)
    dist.destroy_process_group()
    return t.item()


def group_by_some_ranks():
    """Only ranks 0 and 1 call new_group([0, 1]); torch 2.13 lets them, and every later group is numbered
    differently on them than on the others."""
    rank, _ = _init()
    if rank < 2:
        g = dist.new_group([0, 1])
        t = torch.ones(1)
        dist.all_reduce(t, group=g)
    dist.destroy_process_group()
    return rank


def isend_never_received():
    """Rank 0 posts an isend nobody receives, never waits on it, and leaves; rank 1 just leaves."""
    rank, _ = _init()
    if rank == 0:
        dist.isend(torch.ones(2), dst=1)
    dist.barrier()
    dist.destroy_process_group()
    return rank


def extra_async_collective():
    """Rank 0 makes one more (asynchronous, never waited) all_reduce than its peer."""
    rank, _ = _init()
    t = torch.ones(1)
    dist.all_reduce(t)
    if rank == 0:
        dist.all_reduce(t, async_op=True)
    dist.destroy_process_group()
    return rank


def never_destroyed():
    rank, _ = _init()
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


def data_parallel_loop(steps=300):
    """A correct loop: broadcast the initial weights, then per step all_reduce every gradient, an async all_reduce
    of the loss that is waited on, a barrier now and then, a point-to-point heartbeat in rank order, and the group
    destroyed at the end."""
    rank, world = _init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for step in range(steps):
        x = torch.randn(4, 8, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, async_op=True).wait()
        if step % 50 == 0:
            dist.barrier()
            beat = torch.tensor([float(step)])
            if rank == 0:
                for peer in range(1, world):
                    dist.send(beat, dst=peer)
            else:
                dist.recv(beat, src=0)
    weights = [p.detach().clone() for p in model.parameters()]
    dist.destroy_process_group()
    return float(sum(w.sum() for w in weights))


def save_checkpoint(step):
    """Written for every rank, called by one: a barrier so nobody reads a half-written checkpoint."""
    dist.barrier()
    return step


def checkpoint_on_rank_zero():
    """The new user's hang: rank 0 alone enters save_checkpoint (and its barrier), the others go on training."""
    rank, _ = _init()
    t = torch.ones(3)
    for step in range(3):
        dist.all_reduce(t)
        if step == 1 and rank == 0:
            save_checkpoint(step)
    dist.destroy_process_group()


def gathered_across_devices():
    """Samples on (simulated) cuda:<rank> gathered as objects: each comes back on its sender's device; the ranks
    move them before stacking, so the run finishes, but the tensors they were handed lived elsewhere."""
    from sandbox import simulate

    rank, world = _init()
    mine = simulate.DeviceSample(rewards=simulate.on_device(torch.rand(3), f"cuda:{rank}"))
    pool = [None] * world
    dist.all_gather_object(pool, mine)
    with simulate.devices_checked():
        stacked = torch.stack([s["rewards"].to(f"cuda:{rank}") for s in pool])
    dist.destroy_process_group()
    return str(stacked.device)
