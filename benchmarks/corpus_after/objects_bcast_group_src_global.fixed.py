# case: objects_bcast_group_src_global
# fixed: pass the leader's rank inside the group (group_src=0) rather than its global rank
# world: 4
# nccl: yes
"""Sequence-parallel groups [0, 2] and [1, 3]: the group leader (the group's first member) broadcasts the batch
metadata to its group, named by its rank inside the group (group_src=0), so both groups receive their own leader's
metadata. From: https://github.com/vllm-project/vllm-omni/pull/6264"""
import datetime

import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=10)
SP_GROUPS = [[0, 2], [1, 3]]


def main():
    dist.init_process_group("gloo", timeout=TIMEOUT)
    rank = dist.get_rank()
    groups = [dist.new_group(ranks, timeout=TIMEOUT) for ranks in SP_GROUPS]
    sp_group = groups[rank % 2]
    leader = dist.get_global_rank(sp_group, 0)
    box = [{"sender": rank, "seq_len": 128 * (rank + 1)}]
    dist.broadcast_object_list(box, group_src=0, group=sp_group)
    meta = box[0]
    assert meta["sender"] == leader, (
        f"rank {rank}: got metadata from rank {meta['sender']}, expected leader {leader}")
    print(f"rank {rank}: seq_len {meta['seq_len']} from leader {leader}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
