"""CORRECT: rewritten with DistributedDataParallel, equal shares (tail dropped); every rank calls evaluate().

Idea: wrap the model in `torch.nn.parallel.DistributedDataParallel`, which all_reduces the gradients in
backward() and divides them by the world size: the same per-step average as the hand-written loop. DDP needs
every rank to run the same number of backward passes, so each rank keeps `samples // world` of its strided
samples (13 over 4: three each). Evaluation: every rank calls evaluate() on the plain module (its all_reduce is
then matched on every rank); rank 0 prints. Expected weights: the tail-dropped reference.

    python -m sandbox.run -n 4 train.py --samples 13 --eval-every 2
"""
import argparse

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
        loss = torch.nn.functional.mse_loss(model(x), y).reshape(1)
    dist.all_reduce(loss)
    return loss.item() / dist.get_world_size()


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
    model = DDP(net)                                     # FIX: DDP averages the gradients in backward()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    x, y = make_data(args.samples)
    mine = list(range(rank, args.samples, world))[:args.samples // world]   # FIX: equal shares

    for step, i in enumerate(mine, start=1):
        loss = torch.nn.functional.mse_loss(model(x[i:i + 1]), y[i:i + 1])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.eval_every and step % args.eval_every == 0:
            val = evaluate(net, x, y)                    # FIX: every rank calls it, rank 0 prints
            if rank == 0:
                print(f"step {step}: validation loss {val:.4f}")

    weights = torch.cat([p.detach().flatten() for p in net.parameters()])
    dist.barrier()
    if rank == 0:
        print("final weights:", [round(v, 6) for v in weights.tolist()])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
