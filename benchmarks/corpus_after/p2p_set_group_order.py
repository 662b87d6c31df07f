# case: p2p_set_group_order
# class: p2p/cycle
# names: p2p_cycle
# world: 2
# culprits: 0,1
# cause: dist.all_reduce, line 33
# nccl: yes
"""A trainer keeps one process group per purpose (gradient sync, loss logging, MoE aux loss) and, at the end of a
step, reduces every purpose named in a Python set. A set of strings iterates in hash order, and each torchrun
process draws its own string-hash seed, so the two ranks usually walk the set in different orders: rank 0 blocks in
one group's all_reduce while rank 1 blocks in another group's, a cycle across groups that only the timeout ends.
Fails whenever the two orders differ (5 of 6 seed pairs on average).
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
    print(f"rank {rank}: reducing {list(pending)}", flush=True)
    for name in pending:
        order.append(name)
        dist.all_reduce(values[name], group=groups[name])

    print(f"rank {rank}: reduced {order}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
