"""WRONG: evaluate() all_reduces over a group of rank 0 alone, created by rank 0 alone.

Idea: the tail is dropped (`samples // world`, so the step counts agree); `if rank == 0:` stays around the call, and
evaluate() creates `dist.new_group([0])` and all_reduces the loss over it, "so that only rank 0 takes part".

What it breaks: the rule of groups: every rank must call every `new_group` (unless
`use_local_synchronization=True`), with the same ranks, in the same order, since groups are named by that order.
Here ranks 1-3 never call it, and rank 0 creates a new group at every evaluation. Under this PyTorch (2.13, gloo)
it does not hang: every run finishes with the right weights (the tail-dropped reference) and the loss is rank 0's
own, but the sandbox warns `group_mismatch` ("Only rank 0 created group [0]") on the runs that evaluate (with
`--strict` it exits 1), and any
group created later by all ranks would be numbered differently on rank 0 than on the others. The right fix is
simply no collective in evaluate() (or every rank calling it).

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
    only_me = dist.new_group([0])                        # a group of rank 0 alone, for its own all_reduce
    dist.all_reduce(loss, group=only_me)
    return loss.item() / dist.get_world_size(only_me)


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
        if rank == 0 and args.eval_every and step % args.eval_every == 0:
            print(f"step {step}: validation loss {evaluate(model, x, y):.4f}")

    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    dist.barrier()
    if rank == 0:
        print("final weights:", [round(v, 6) for v in weights.tolist()])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
