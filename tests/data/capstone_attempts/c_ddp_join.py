"""CORRECT: DistributedDataParallel with `Join`, keeping every sample; evaluate() makes no collective.

Idea (lab 11's fix): wrap the model in DDP and run the loop under `with Join([model]):`. Ranks 1-3 run out of
samples after three steps; while rank 0 runs its fourth, they shadow its gradient all_reduce with zeros, and DDP
still divides by the initial world size, so sample 12 weighs a quarter of a normal step. Under Join only DDP's own
collectives are shadowed, so evaluation must make none: `if rank == 0:` stays around the call and evaluate()
computes the loss locally. At the end Join leaves every rank with the same weights. Expected weights: the Join
reference (three averaged steps, then lr * grad(sample 12) / 4). Note: the capstone's text names the dropped and
padded references only; this is the third, lab 11's.

    python -m sandbox.run -n 4 train.py --samples 13 --eval-every 2
"""
import argparse

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP


def make_data(samples: int):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1
    return x, y


def evaluate(model, x, y):
    # FIX: local; no collective that a joined rank could not shadow
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
    model = DDP(net)                                     # FIX: DDP's all_reduces can be shadowed by Join
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    x, y = make_data(args.samples)
    mine = list(range(rank, args.samples, world))

    with Join([model]):                                  # FIX: ranks out of data shadow the extra step
        for step, i in enumerate(mine, start=1):
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
