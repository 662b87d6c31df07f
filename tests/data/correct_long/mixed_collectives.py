"""Mixed collectives in a long loop (2 ranks): all_reduce, broadcast with a
rotating root, all_gather, all_gather_into_tensor (deprecated in torch 2.13 for
all_gather_single, still what most code calls: its FutureWarning is expected),
reduce, barrier.

Stresses: a judge that matches call #k across ranks while the op changes at
every call; broadcast/reduce roots alternate, so a rank-dependent reading of
"root" must not be taken for a mismatch. Every result is checked.
"""
# ranks: 2
import os

import torch
import torch.distributed as dist

STEPS = 400


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    for i in range(STEPS):
        # all_reduce
        a = torch.full((4,), float(rank + 1) * (i % 7 + 1))
        dist.all_reduce(a)
        want = float(sum(r + 1 for r in range(world)) * (i % 7 + 1))
        if not torch.all(a == want):
            raise RuntimeError(f"step {i}: all_reduce {a.tolist()} != {want}")

        # broadcast, root rotates
        root = i % world
        b = torch.full((3,), float(i * 10 + rank))
        dist.broadcast(b, src=root)
        if not torch.all(b == float(i * 10 + root)):
            raise RuntimeError(f"step {i}: broadcast {b.tolist()}")

        # all_gather (list form)
        out = [torch.zeros(2) for _ in range(world)]
        dist.all_gather(out, torch.tensor([float(rank), float(i)]))
        for r, o in enumerate(out):
            if o.tolist() != [float(r), float(i)]:
                raise RuntimeError(f"step {i}: all_gather slot {r} = {o.tolist()}")

        # all_gather_into_tensor
        flat = torch.zeros(world * 2)
        dist.all_gather_into_tensor(flat, torch.tensor([float(rank), float(-i)]))
        exp = []
        for r in range(world):
            exp += [float(r), float(-i)]
        if flat.tolist() != exp:
            raise RuntimeError(f"step {i}: all_gather_into_tensor {flat.tolist()}")

        # reduce to a rotating destination
        dst = (i + 1) % world
        c = torch.tensor([float(rank * 2 + i)])
        dist.reduce(c, dst=dst, op=dist.ReduceOp.MAX)
        if rank == dst and c.item() != float((world - 1) * 2 + i):
            raise RuntimeError(f"step {i}: reduce {c.item()}")

        if i % 5 == 0:
            dist.barrier()
    print(f"rank {rank}: {STEPS} mixed steps ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
