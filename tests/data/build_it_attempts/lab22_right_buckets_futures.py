"""Lab 22 (data parallelism), task `MyBuckets` (section 4 cell; run by `my_bucketed()` = `dp.train(MyBuckets)`).

CORRECT (alternative).
Uses the work's Future, as DDP communication hooks do: each bucket's async all_reduce gets a
`.get_future().then(...)` callback that divides by the world size and writes the averaged slices back into
p.grad; finish() launches the buckets still waiting (unused parameters as zeros) and waits on every work
and on its callback's future (`work.wait()`, then `fut.wait()`) before the optimizer step. Buckets start from the hook
in index order, so every rank issues the same calls in the same order.
Source: torch.distributed.Work.get_future and DDP comm hooks (torch/distributed/algorithms/ddp_comm_hooks).
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
        self.futures = []
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(self.hook)

    def _launch(self, i):
        bucket = self.buckets[i]
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in bucket])
        world = self.world

        def unpack(fut):
            summed = fut.value()[0] / world
            offset = 0
            for p in bucket:
                p.grad = summed[offset:offset + p.numel()].view_as(p).clone()
                offset += p.numel()
            return summed

        work = dist.all_reduce(flat, async_op=True)
        self.futures.append((work, work.get_future().then(unpack)))

    def hook(self, p):
        self.count[self.index[p]] += 1
        while self.next < len(self.buckets) and self.count[self.next] == len(self.buckets[self.next]):
            self._launch(self.next)
            self.next += 1

    def finish(self):
        while self.next < len(self.buckets):
            self._launch(self.next)
            self.next += 1
        for work, fut in self.futures:
            work.wait()
            fut.wait()
        self.futures = []
        self.count = [0] * len(self.buckets)
        self.next = 0


def my_bucketed():
    return dp.train(MyBuckets)
