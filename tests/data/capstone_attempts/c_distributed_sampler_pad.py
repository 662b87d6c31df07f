"""CORRECT: pad the tail as DistributedSampler does; every rank calls evaluate().

Idea: take this rank's indices from `DistributedSampler(range(samples), num_replicas=world, rank=rank,
shuffle=False)`. It pads 13 indices to 16 by repeating the first three (0, 1, 2), so every rank gets four and
makes four steps; the strided order is the same as the original script's. Evaluation: every rank calls
evaluate() and rank 0 prints. Expected weights: the padded reference (4 steps on 13 samples, the last averaging
samples 12, 0, 1, 2).

    python -m sandbox.run -n 4 train.py --samples 13 --eval-every 2
"""
import argparse

import torch
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler


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
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    x, y = make_data(args.samples)
    # FIX: the sampler pads the tail, so every rank gets ceil(samples / world) indices
    sampler = DistributedSampler(range(args.samples), num_replicas=world, rank=rank, shuffle=False)
    mine = list(sampler)

    for step, i in enumerate(mine, start=1):
        loss = torch.nn.functional.mse_loss(model(x[i:i + 1]), y[i:i + 1])
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        if args.eval_every and step % args.eval_every == 0:
            val = evaluate(model, x, y)                  # FIX: called by every rank, printed by rank 0
            if rank == 0:
                print(f"step {step}: validation loss {val:.4f}")

    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    dist.barrier()
    if rank == 0:
        print("final weights:", [round(v, 6) for v in weights.tolist()])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
