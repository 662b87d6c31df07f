"""WRONG: the gradients are summed over the ranks, not averaged (the `/= world` was dropped).

Idea: both bugs fixed the usual way (the tail dropped with `samples // world`, every rank calls evaluate(), rank 0
prints), but while tidying the loop the learner kept only `dist.all_reduce(p.grad)` and removed `p.grad /= world`,
"the all_reduce already combines them". It finishes on every run, with no error, and the replicas agree.

What it breaks: data-parallel SGD must average the gradients over the ranks so that a step equals the
single-process step on the global batch. The sum is `world` times the average, so every step is four times too
long (an effective learning rate of 0.4 instead of 0.1): the final weights differ from both references on every
run (on --samples 12 too).

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
    mine = list(range(rank, args.samples, world))[:args.samples // world]

    for step, i in enumerate(mine, start=1):
        loss = torch.nn.functional.mse_loss(model(x[i:i + 1]), y[i:i + 1])
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)                      # summed over the ranks; never divided
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
