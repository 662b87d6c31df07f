"""WRONG: DDP, and the extra step past the common count runs under `model.no_sync()` (rank 0 only).

Idea (lab 11's exercise 3): wrap the model in DDP, agree on the smallest share with `all_reduce(MIN)`, and keep
every sample: the steps past it (13 over 4: rank 0's fourth, sample 12) run under `model.no_sync()`, so that
backward makes no all_reduce that lacks a partner. evaluate() makes no collective (rank 0 only). It finishes on
every run, with no error.

What it breaks: the replicas must stay identical, and every update must be the average over the ranks. Under
`no_sync()` rank 0 applies sample 12's gradient alone and undivided (a full lr * grad step, four times the weight
of Join's and unlike either the dropped or the padded reference), while ranks 1-3 never hear of it: they end with
the tail-dropped weights, rank 0 with others. With --samples 13, rank 0's printed weights match no reference; with
--samples 12 there is no extra step and the weights are right.

    python -m sandbox.run -n 4 train.py --samples 13 --eval-every 2
"""
import argparse
import contextlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def make_data(samples: int):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1
    return x, y


def evaluate(model, x, y):
    with torch.no_grad():
        return torch.nn.functional.mse_loss(model(x), y).item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=13)
    parser.add_argument("--eval-every", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 1)
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    x, y = make_data(args.samples)
    mine = list(range(rank, args.samples, world))
    n = torch.tensor([len(mine)])
    dist.all_reduce(n, op=dist.ReduceOp.MIN)             # the count every rank has

    for step, i in enumerate(mine, start=1):
        with model.no_sync() if step > int(n) else contextlib.nullcontext():   # past it: no all_reduce
            loss = torch.nn.functional.mse_loss(model(x[i:i + 1]), y[i:i + 1])
            opt.zero_grad()
            loss.backward()
        opt.step()
        if rank == 0 and args.eval_every and step % args.eval_every == 0:
            print(f"step {step}: validation loss {evaluate(net, x, y):.4f}")

    weights = torch.cat([p.detach().flatten() for p in net.parameters()])
    dist.barrier()
    if rank == 0:
        print("final weights:", [round(v, 6) for v in weights.tolist()])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
