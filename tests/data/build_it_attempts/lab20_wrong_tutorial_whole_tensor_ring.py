"""Lab 20 (ring all-reduce), task `my_ring_all_reduce(tensor)` (section 1, "Your ring" cell).

WRONG.
Property violated: this is the ring from PyTorch's "Writing Distributed Applications" tutorial
(pytorch.org/tutorials/intermediate/dist_tuto.html, "Our Own Ring-Allreduce"): the WHOLE tensor travels
around the ring N-1 times and every rank accumulates it. There is no reduce-scatter and no all-gather, no
chunks: each rank makes N-1 sends of the full tensor (N-1 times its size in bytes) instead of 2(N-1) sends
of one N-th (2(N-1)/N of its size).
Values: right on every world size and every length (it is a correct sum), so only counting sends / bytes,
or the size of each message, catches it. At N=4 with 10 floats: 3 sends of 40 bytes = 120 bytes, not 6
sends and 56-64 bytes.
Source: the official tutorial (the "ring" whose only novelty is alternating two buffers).
"""
import torch
import torch.distributed as dist


def my_ring_all_reduce(tensor):
    rank, size = dist.get_rank(), dist.get_world_size()
    send_buff = tensor.clone()
    recv_buff = tensor.clone()
    accum = tensor.clone()
    left = ((rank - 1) + size) % size
    right = (rank + 1) % size
    for i in range(size - 1):
        if i % 2 == 0:
            send_req = dist.isend(send_buff, right)
            dist.recv(recv_buff, left)
            accum[:] += recv_buff[:]
        else:
            send_req = dist.isend(recv_buff, right)
            dist.recv(send_buff, left)
            accum[:] += send_buff[:]
        send_req.wait()
    tensor[:] = accum[:]
    return tensor
