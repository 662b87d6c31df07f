"""Lab 22 (data parallelism), task `MyBuckets` (section 4 cell; run by `my_bucketed()` = `dp.train(MyBuckets)`).

WRONG.
Property violated: the averaged gradient must reach p.grad before the optimizer step. Buckets are flattened
with torch.cat (a COPY), all_reduced asynchronously from the hooks in index order and waited on, but the
learner divides the flat buffer and never copies it back into the parameters' .grad (believing cat returns
views). Every rank steps on its own slice's gradient.
Values: right only at N=1; wrong at every N >= 2 (ranks disagree). The overlap rule is satisfied.
Source: torch.cat vs views / `_flatten_dense_tensors` + `_unflatten_dense_tensors` confusion, frequent in
hand-rolled bucketing code.
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
        self.works = []
        self.next = 0
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self.hook)

    def _launch(self, i):
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in self.buckets[i]])
        self.works.append((flat, dist.all_reduce(flat, async_op=True)))

    def hook(self, p):
        self.count[self.index[p]] += 1
        while self.next < len(self.buckets) and self.count[self.next] == len(self.buckets[self.next]):
            self._launch(self.next)
            self.next += 1

    def finish(self):
        while self.next < len(self.buckets):
            self._launch(self.next)
            self.next += 1
        for flat, work in self.works:
            work.wait()
            flat /= self.world  # ... and never written back to p.grad
        self.works = []
        self.count = [0] * len(self.buckets)
        self.next = 0


def my_bucketed():
    return dp.train(MyBuckets)
