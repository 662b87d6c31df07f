"""WRONG: only rank 0 drops its last sample ("rank 0 is the one with the extra step").

Idea: the learner saw rank 0 make a fourth step on 13 samples and special-cases it: `if rank == 0 and
args.samples % world: mine = mine[:-1]`. Every rank calls evaluate(); rank 0 prints. On the checker's three runs
this happens to be the tail-dropped fix (13 over 4 leaves exactly one extra sample, and it is rank 0's), so it
finishes with the tail-dropped reference's weights: right-looking.

What it breaks: every rank must make the same number of steps, whatever the sizes. The count is fixed for one
case only: with --samples 14 on 4 ranks, ranks 0 and 1 hold four samples, rank 0 drops one and rank 1 still makes
a fourth round of gradient all_reduces that nobody matches: it hangs (likewise --samples 15: ranks 1 and 2).

    python -m sandbox.run -n 4 train.py --samples 13 --eval-every 2
"""
import argparse

import torch
import torch.distributed as dist


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
    mine = list(range(rank, args.samples, world))
    if rank == 0 and args.samples % world:               # rank 0 has the extra sample: drop it
        mine = mine[:-1]

    for step, i in enumerate(mine, start=1):
        loss = torch.nn.functional.mse_loss(model(x[i:i + 1]), y[i:i + 1])
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        if args.eval_every and step % args.eval_every == 0:
            val = evaluate(model, x, y)
            if rank == 0:
                print(f"step {step}: validation loss {val:.4f}")

    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    dist.barrier()
    if rank == 0:
        print("final weights:", [round(v, 6) for v in weights.tolist()])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
