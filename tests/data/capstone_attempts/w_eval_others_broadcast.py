"""WRONG: evaluation moved, but ranks 1-3 match rank 0's all_reduce with a broadcast.

Idea: the tail is dropped (`samples // world`, so the step counts agree) and the learner knows the other ranks
must "take part" in rank 0's evaluation: rank 0 calls evaluate() (an all_reduce of the loss) and, at the same
step, ranks 1-3 call `dist.broadcast(torch.zeros(1), src=0)` "to receive the loss".

What it breaks: a collective must be the same op on every rank of the group (same call, same shape, same order).
At the first evaluation rank 0 makes an all_reduce and ranks 1-3 a broadcast: the sandbox reports a collective
mismatch and the run hangs, on --samples 12 --eval-every 2 and --samples 13 --eval-every 2. With --eval-every 0
there is no evaluation and the run finishes with the tail-dropped reference's weights.

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
    per_rank = args.samples // world                     # the tail is dropped
    mine = list(range(rank, args.samples, world))[:per_rank]

    for step, i in enumerate(mine, start=1):
        loss = torch.nn.functional.mse_loss(model(x[i:i + 1]), y[i:i + 1])
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        if args.eval_every and step % args.eval_every == 0:
            if rank == 0:
                print(f"step {step}: validation loss {evaluate(model, x, y):.4f}")
            else:
                dist.broadcast(torch.zeros(1), src=0)    # the others take part: receive rank 0's loss

    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    dist.barrier()
    if rank == 0:
        print("final weights:", [round(v, 6) for v in weights.tolist()])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
