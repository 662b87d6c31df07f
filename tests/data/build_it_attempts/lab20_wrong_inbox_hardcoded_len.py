"""Lab 20 (ring all-reduce), task `my_ring_all_reduce(tensor)` (section 1, "Your ring" cell).

WRONG.
Property violated: "for any length". The receive buffer's size is hard-coded from the lab's example: 10
floats on 4 ranks make chunks of 3, 3, 2, 2, so the learner writes `torch.empty(3)`.
Values: with 10 floats, right at N=4, 5, 8 (largest chunk <= 3); at N=2 (chunks of 5) and N=3 (4, 3, 3)
the inbox is too small: the irecv of a 3-element view meets a send of 4 or 5 elements, and gloo fails
(size mismatch) or the sum is wrong. For any longer tensor (e.g. 17 floats on 4 ranks) it fails at every N.
Source: hard-coding the lab's tensor length.
"""
import torch
import torch.distributed as dist


def my_ring_all_reduce(tensor):
    n, me = dist.get_world_size(), dist.get_rank()
    right, left = (me + 1) % n, (me - 1) % n
    chunks = tensor.tensor_split(n)
    inbox = torch.empty(3, dtype=tensor.dtype)  # 10 floats / 4 ranks: the largest chunk has 3
    for s in range(n - 1):
        into = chunks[(me - s - 1) % n]
        k = min(into.numel(), inbox.numel())
        reqs = [dist.isend(chunks[(me - s) % n], dst=right), dist.irecv(inbox[:k], src=left)]
        for r in reqs:
            r.wait()
        into[:k] += inbox[:k]
    for s in range(n - 1):
        reqs = [dist.isend(chunks[(me + 1 - s) % n], dst=right), dist.irecv(chunks[(me - s) % n], src=left)]
        for r in reqs:
            r.wait()
    return tensor
