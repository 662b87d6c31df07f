# case: bucket_count_hang
# label: hang
# world: 4
# culprits: 3
# cause: all_reduce, line 47; order made at line 33
"""Bucketed gradient all_reduce of the task heads this rank's batch touched.

Three task heads of different sizes. Each rank appends a head to `touched` the first
time its batch routes a sample to it, packs the gradients in that order into
fixed-size CAP-element buckets (a new bucket when the next one does not fit) and
all_reduces each bucket. Ranks 0-2 touch seg, det, cls (2 buckets); rank 3 touches
seg, cls, det (3 buckets), so its third all_reduce meets the others' barrier.
Modelled on NVIDIA/Megatron-LM#2218 (ranks reduce gradient buckets in different
orders and hang) and deepspeedai/DeepSpeed#1186 (buckets filled in ready order):
https://github.com/NVIDIA/Megatron-LM/pull/2218
"""
import datetime
import torch
import torch.distributed as dist

SIZES = {"seg": 2, "det": 3, "cls": 4}
CAP = 5  # bucket capacity in elements; rank r gets samples r, r+4, r+8
BATCH = ["seg"] * 4 + ["det", "det", "det", "cls", "cls", "cls", "cls", "det"]


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    touched, grads = [], {}
    for i in range(rank, len(BATCH), world):
        head = BATCH[i]
        if head not in touched:
            touched.append(head)
            grads[head] = torch.zeros(SIZES[head])
        grads[head] += float(i + 1)

    buckets, cur = [], []
    for head in touched:
        if cur and sum(SIZES[h] for h in cur) + SIZES[head] > CAP:
            buckets.append(cur)
            cur = []
        cur.append(head)
    buckets.append(cur)
    for bucket in buckets:
        n = sum(SIZES[h] for h in bucket)
        flat = torch.cat([grads[h] for h in bucket] + [torch.zeros(CAP - n)])  # fixed-size buffer
        dist.all_reduce(flat)
        for h, g in zip(bucket, flat[:n].split([SIZES[h] for h in bucket])):
            grads[h].copy_(g)
    dist.barrier()  # before the optimizer step

    want = {h: sum(float(i + 1) for i, b in enumerate(BATCH) if b == h) for h in SIZES}
    ok = all(torch.equal(grads[h], torch.full((SIZES[h],), want[h])) for h in SIZES)
    print(f"rank {rank}: {'OK' if ok else 'WRONG'} head gradients, buckets={buckets}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
