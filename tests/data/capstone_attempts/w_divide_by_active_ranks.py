"""WRONG: on the extra step, rank 0 divides its gradient by the number of ranks that still have data (1), alone.

Idea: the learner computes, for each step, how many ranks still hold a sample for it (`active`, from the strided
shares). While all of them do, the gradients are all_reduced and divided by the world size as before; on a step
only some ranks have (13 over 4: rank 0's fourth, sample 12), "the others are done", so the ranks that still have
data skip the all_reduce and divide by `active` instead. evaluate() makes no collective (rank 0 only). It finishes
on every run, with no error.

What it breaks: an update must be an average over all the ranks, made by all of them, so that the replicas stay
identical. Here the extra step is made by rank 0 alone: ranks 1-3 never apply it (they end with the tail-dropped
weights), and rank 0 applies sample 12's whole gradient (lr * grad / 1), four times what Join does and unlike the
padded reference. With --samples 13 rank 0's printed weights match no reference; with --samples 12 they are right.

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
    mine = list(range(rank, args.samples, world))
    shares = [len(range(r, args.samples, world)) for r in range(world)]

    for step, i in enumerate(mine, start=1):
        loss = torch.nn.functional.mse_loss(model(x[i:i + 1]), y[i:i + 1])
        opt.zero_grad()
        loss.backward()
        active = sum(1 for s in shares if s >= step)     # ranks that still have a sample for this step
        for p in model.parameters():
            if active == world:
                dist.all_reduce(p.grad)
            p.grad /= active                             # the others are done: average over those left
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
