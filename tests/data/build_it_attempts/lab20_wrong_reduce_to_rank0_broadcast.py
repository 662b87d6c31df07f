"""Lab 20 (ring all-reduce), task `my_ring_all_reduce(tensor)` (section 1, "Your ring" cell).

WRONG.
Property violated: not a ring. Every rank sends its whole tensor to rank 0, rank 0 sums and sends the sum
back to every rank (a star / parameter-server "reduce then broadcast" built from send and recv). Rank 0
makes N-1 sends and N-1 receives of the whole tensor; the others one of each; ranks talk to ranks that are
not their neighbours.
Values: right on every world size and length. Point-to-point only, no deadlock (rank 0 receives in order).
Only a check of who sends to whom (rank r only to r+1) or of send counts / bytes per rank catches it.
Source: the textbook naive all-reduce (reduce + broadcast), what many write before learning the ring.
"""
import torch
import torch.distributed as dist


def my_ring_all_reduce(tensor):
    n, me = dist.get_world_size(), dist.get_rank()
    if me == 0:
        buf = torch.empty_like(tensor)
        for src in range(1, n):
            dist.recv(buf, src=src)
            tensor += buf
        for dst in range(1, n):
            dist.send(tensor, dst=dst)
    else:
        dist.send(tensor, dst=0)
        dist.recv(tensor, src=0)
    return tensor
