"""Lab 20 (ring all-reduce), task `my_ring_all_reduce(tensor)` (section 1, "Your ring" cell).

WRONG.
Property violated: "on any number of ranks and for any length". The ring is otherwise right (isend/irecv,
then wait), but it cuts the tensor with `tensor.chunk(n)` instead of `tensor_split(n)`. torch.chunk makes
chunks of ceil(len/n) and may return FEWER than n chunks (documented in torch.chunk: "may return fewer than
the specified number of chunks").
Values: with the lab's 10 floats, chunk gives 4 chunks at N=2,3,4,5 (sizes 5,5 / 4,4,2 / 3,3,3,1 / 2x5) and
the sum is right; at N=6, 7, 8 it gives only 5 chunks (2 each) and the ring indexes a chunk that does not
exist (IndexError on some ranks, the others then hang). With 3 floats on 4 ranks it fails too (3 chunks).
Source: torch.chunk vs tensor_split is a known pitfall (torch docs; many forum questions "chunk returns fewer
chunks than requested").
"""
import torch
import torch.distributed as dist


def my_ring_all_reduce(tensor):
    n, me = dist.get_world_size(), dist.get_rank()
    right, left = (me + 1) % n, (me - 1) % n
    chunks = tensor.chunk(n)
    inbox = torch.empty_like(chunks[0])
    for s in range(n - 1):
        into = chunks[(me - s - 1) % n]
        reqs = [dist.isend(chunks[(me - s) % n], dst=right), dist.irecv(inbox[:into.numel()], src=left)]
        for r in reqs:
            r.wait()
        into += inbox[:into.numel()]
    for s in range(n - 1):
        reqs = [dist.isend(chunks[(me + 1 - s) % n], dst=right), dist.irecv(chunks[(me - s) % n], src=left)]
        for r in reqs:
            r.wait()
    return tensor
