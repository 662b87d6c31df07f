"""Lab 20 (ring all-reduce), task `my_ring_all_reduce(tensor)` (section 1, "Your ring" cell).

WRONG.
Property violated: "with point-to-point calls only". The learner keeps the ring's shape (tensor_split into N
chunks, a loop per phase) but, stuck on the deadlock, lets `dist.all_reduce` do the reduce-scatter phase
chunk by chunk; the "all-gather" phase then does nothing useful. There is no send/recv at all.
Values: right on every world size and length (dist.all_reduce is the reference itself). Only a check that
looks at which primitives were called (no collective allowed; 2(N-1) sends expected) catches it.
Source: a common shortcut in course forums ("it passes, and it is still a ring of chunks").
"""
import torch
import torch.distributed as dist


def my_ring_all_reduce(tensor):
    n = dist.get_world_size()
    chunks = tensor.tensor_split(n)
    for c in chunks:  # "reduce-scatter": each chunk summed over the ranks
        if c.numel():
            dist.all_reduce(c)
    return tensor
