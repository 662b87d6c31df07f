"""WRONG: every rank trains on all the samples alone; no gradient all_reduce at all.

Idea (a learner's shortcut): "the all_reduces are what hang, so let each rank compute the averaged gradient
itself": every rank takes, at step k, the whole global batch of `world` samples (k*world .. k*world+world-1, the
tail dropped), and averages the gradient over it locally (mse_loss's mean). evaluate() makes no collective and
rank 0 prints. It finishes on every run and rank 0 prints the tail-dropped reference's weights (the gradient of
the batch mean IS the average of the per-sample gradients).

What it breaks: data parallelism itself. The ranks do not share the work (each rank computes all `world`
samples' gradients of every step, 4x the compute, and the 4 copies are redundant) and no gradient is averaged
over the ranks: no tensor is ever exchanged (the final barrier is the only collective), so the replicas only
agree because they compute the same thing. The weights are right; the method is not.

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
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    x, y = make_data(args.samples)
    steps = args.samples // world

    for step in range(1, steps + 1):
        batch = slice((step - 1) * world, step * world)  # the whole step's samples, on every rank
        loss = torch.nn.functional.mse_loss(model(x[batch]), y[batch])
        opt.zero_grad()
        loss.backward()                                  # already the average: no all_reduce needed (?)
        opt.step()
        if rank == 0 and args.eval_every and step % args.eval_every == 0:
            print(f"step {step}: validation loss {evaluate(model, x, y):.4f}")

    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    dist.barrier()
    if rank == 0:
        print("final weights:", [round(v, 6) for v in weights.tolist()])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
