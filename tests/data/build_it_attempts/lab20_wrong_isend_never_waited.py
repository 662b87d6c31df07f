"""Lab 20 (ring all-reduce), task `my_ring_all_reduce(tensor)` (section 1, "Your ring" cell).

WRONG.
Property violated: every asynchronous request must be waited on (the sandbox's contract, lab 05
"isend-unwaited"; torch.distributed.isend's docs: modifying the tensor before the request completes is
undefined). The learner fixes the deadlock by turning `send` into `isend` and never keeps the request:
only the blocking `recv` orders the steps.
Values: expected right in principle, but MEASURED on torch 2.13 + gloo (verify_values.py): it raises a gloo
error (unbound_buffer.cc) at every N tested (2, 3, 4, 5, 8): a dropped isend request is aborted when its Work
object is destroyed. So on this stack it fails loudly; a check must still name the unwaited request.
Source: the "just make it isend" half-fix, cf. PyTorch forum threads on isend without wait.
"""
import torch
import torch.distributed as dist


def my_ring_all_reduce(tensor):
    n, me = dist.get_world_size(), dist.get_rank()
    right, left = (me + 1) % n, (me - 1) % n
    chunks = tensor.tensor_split(n)
    inbox = torch.empty_like(chunks[0])
    for s in range(n - 1):
        into = chunks[(me - s - 1) % n]
        dist.isend(chunks[(me - s) % n], dst=right)  # request dropped
        dist.recv(inbox[:into.numel()], src=left)
        into += inbox[:into.numel()]
    for s in range(n - 1):
        dist.isend(chunks[(me + 1 - s) % n], dst=right)  # request dropped
        dist.recv(chunks[(me - s) % n], src=left)
    return tensor
