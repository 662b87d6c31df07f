# case: bucket_count_fixed_order
# label: ok
# world: 4
# culprits: none
# cause: none (correct twin of f5_bucket_count_hang.py: buckets built in model order)
"""Correct twin of f5_bucket_count_hang.py: bucketed all_reduce of task-head gradients.

Each rank still appends a head to `touched` in the order its batch meets it, but the
buckets are filled in the model's fixed head order (SIZES), the same on every rank,
so every rank packs the same heads into the same 2 buckets (as DDP fixes its
parameter-to-bucket mapping at construction).
The fix for the pattern in NVIDIA/Megatron-LM#2218 and deepspeedai/DeepSpeed#1186:
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
    for head in SIZES:  # the model's head order, the same on every rank
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
