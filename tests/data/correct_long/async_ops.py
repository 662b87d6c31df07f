"""A loop of async_op=True collectives with waits (2 ranks).

Stresses: several collectives in flight at once on each rank (all_reduce,
broadcast, all_gather issued with async_op=True), waited on in a different
order from the one they were issued in, sometimes one step later (overlap with
the next step's work), every request waited on before the end. A rank is then
"inside" no call while its collectives run, or waits on an older one while the
peer has issued newer ones. Every result is checked.
"""
# ranks: 2
import os

import torch
import torch.distributed as dist

STEPS = 700


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    carried = None  # (work, tensor, step) waited on one step later
    for i in range(STEPS):
        a = torch.full((8,), float(rank + i))
        w1 = dist.all_reduce(a, async_op=True)
        b = torch.tensor([float(rank * 100 + i)])
        w2 = dist.broadcast(b, src=i % world, async_op=True)
        outs = [torch.zeros(1) for _ in range(world)]
        w3 = dist.all_gather(outs, torch.tensor([float(rank - i)]), async_op=True)
        # wait out of order
        w3.wait()
        w1.wait()
        w2.wait()
        if not torch.all(a == float(sum(r + i for r in range(world)))):
            raise RuntimeError(f"step {i}: async all_reduce {a.tolist()}")
        if b.item() != float((i % world) * 100 + i):
            raise RuntimeError(f"step {i}: async broadcast {b.item()}")
        if [o.item() for o in outs] != [float(r - i) for r in range(world)]:
            raise RuntimeError(f"step {i}: async all_gather {[o.item() for o in outs]}")
        # a reduction overlapped with the next step: waited on one step later
        if carried is not None:
            wk, tk, sk = carried
            wk.wait()
            if tk.item() != float(world * sk):
                raise RuntimeError(f"step {sk}: carried all_reduce {tk.item()}")
        c = torch.tensor([float(i)])
        carried = (dist.all_reduce(c, async_op=True), c, i)
    wk, tk, sk = carried
    wk.wait()
    if tk.item() != float(world * sk):
        raise RuntimeError(f"step {sk}: last carried all_reduce {tk.item()}")
    print(f"rank {rank}: {STEPS} async steps ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
