"""CORRECT: the ranks agree on the smallest share with an all_reduce(MIN); evaluate() makes no collective.

Idea: each rank counts its own samples and the ranks agree on the minimum with `all_reduce(n, op=ReduceOp.MIN)`
(lab 11's "equal shards" fix), so every rank trains that many steps (13 over 4: three, sample 12 is dropped).
Evaluation: `if rank == 0:` stays around the call, but evaluate() no longer all_reduces: rank 0 computes the
loss on the whole validation set itself (the same on every rank, so averaging it was never needed). Expected
weights: the tail-dropped reference.

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
    # FIX: no collective here, so only the rank that prints needs to call it
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
    n = torch.tensor([len(mine)])
    dist.all_reduce(n, op=dist.ReduceOp.MIN)             # FIX: agree on the count every rank has
    mine = mine[:int(n)]

    for step, i in enumerate(mine, start=1):
        loss = torch.nn.functional.mse_loss(model(x[i:i + 1]), y[i:i + 1])
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
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
