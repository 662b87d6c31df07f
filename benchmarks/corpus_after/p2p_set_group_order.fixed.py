# case: p2p_set_group_order
# fixed: the pending purposes are reduced in sorted order, the same on every rank, instead of set (hash) order
# world: 2
# nccl: yes
"""A trainer keeps one process group per purpose (gradient sync, loss logging, MoE aux loss) and, at the end of a
step, reduces every pending purpose. The pending names are sorted before use, so every rank issues the per-group
all_reduces in the same order whatever its string-hash seed.
From: https://github.com/NVIDIA/Megatron-LM/issues/107
"""
import datetime

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    purposes = ["grad", "loss", "moe_aux"]
    groups = {name: dist.new_group([0, 1], timeout=datetime.timedelta(seconds=10)) for name in purposes}
    values = {name: torch.ones(1024) * (rank + 1) for name in purposes}

    pending = set(purposes)  # filled as each purpose finishes its local work
    order = []
    print(f"rank {rank}: reducing {sorted(pending)}", flush=True)
    for name in sorted(pending):
        order.append(name)
        dist.all_reduce(values[name], group=groups[name])

    print(f"rank {rank}: reduced {order}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
