"""Lab 22 (data parallelism), task `MyBuckets` (section 4 cell; run by `my_bucketed()` = `dp.train(MyBuckets)`).

WRONG.
Property violated: the bucket's all_reduce must be ASYNCHRONOUS (async_op=True, waited in finish) so that
backward goes on while it runs. Here the hook issues a blocking `dist.all_reduce` the moment a bucket (in
index order) is complete: the call does start during backward, but backward stops until it returns,
so communication and computation never overlap; it is the naive loop moved into the hooks.
Values: right at every world size that splits the batch (1, 2, 3, 4, 6, 8). A rule that only asks "did an
all_reduce start before backward ended" is satisfied by it; a check must also require async_op / a wait in
finish, or that backward progresses while a call is in flight.
Source: a common misreading of DDP's overlap (pytorch.org/docs/stable/notes/ddp.html); blocking collectives
in autograd hooks are a known slowdown in forum threads.
"""
import torch
import torch.distributed as dist
from sandbox.course import data_parallel as dp


class MyBuckets:
    def __init__(self, model, cap_bytes=dp.CAP_BYTES):
        self.model = model
        self.world = dist.get_world_size()
        self.buckets, cur, size = [], [], 0
        for p in reversed(list(model.parameters())):
            cur.append(p)
            size += p.numel() * p.element_size()
            if size >= cap_bytes:
                self.buckets.append(cur)
                cur, size = [], 0
        if cur:
            self.buckets.append(cur)
        self.index = {p: i for i, b in enumerate(self.buckets) for p in b}
        self.count = [0] * len(self.buckets)
        self.next = 0
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self.hook)

    def _reduce_now(self, i):
        bucket = self.buckets[i]
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in bucket])
        dist.all_reduce(flat)  # blocking, inside backward
        flat /= self.world
        offset = 0
        for p in bucket:
            p.grad = flat[offset:offset + p.numel()].view_as(p).clone()
            offset += p.numel()

    def hook(self, p):
        self.count[self.index[p]] += 1
        while self.next < len(self.buckets) and self.count[self.next] == len(self.buckets[self.next]):
            self._reduce_now(self.next)
            self.next += 1

    def finish(self):
        while self.next < len(self.buckets):
            self._reduce_now(self.next)
            self.next += 1
        self.count = [0] * len(self.buckets)
        self.next = 0


def my_bucketed():
    return dp.train(MyBuckets)
