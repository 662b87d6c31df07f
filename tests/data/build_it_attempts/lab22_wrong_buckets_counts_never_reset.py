"""Lab 22 (data parallelism), task `MyBuckets` (section 4 cell; run by `my_bucketed()` = `dp.train(MyBuckets)`).

WRONG.
Property violated: overlap on EVERY step. The per-bucket readiness counters are never reset in `finish()`,
so a bucket is found "complete" (count == size) only during the first backward; from step 2 on, the hooks
launch nothing and `finish()` launches every bucket after backward. Buckets still start in index order on
every rank and every async call is waited on.
Values: right at every world size that splits the batch (1, 2, 3, 4, 6, 8). A rule that looks for "at least
one all_reduce during backward" over the whole run (not per step) passes it.
Source: forgetting to reset per-iteration state is the classic bug in hand-written reducers (DDP's reducer
has `prepare_for_backward` for exactly this).
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
        self.count = [0] * len(self.buckets)  # never reset: the bug
        self.works = {}
        self.next = 0
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self.hook)

    def _launch(self, i):
        bucket = self.buckets[i]
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in bucket])
        self.works[i] = (flat, dist.all_reduce(flat, async_op=True))

    def hook(self, p):
        self.count[self.index[p]] += 1
        while self.next < len(self.buckets) and self.count[self.next] == len(self.buckets[self.next]):
            self._launch(self.next)
            self.next += 1

    def finish(self):
        for i in range(len(self.buckets)):
            if i not in self.works:
                self._launch(i)
        for i, bucket in enumerate(self.buckets):
            flat, work = self.works[i]
            work.wait()
            flat /= self.world
            offset = 0
            for p in bucket:
                p.grad = flat[offset:offset + p.numel()].view_as(p).clone()
                offset += p.numel()
        self.works = {}
        self.next = 0


def my_bucketed():
    return dp.train(MyBuckets)
