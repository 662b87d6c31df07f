# case: objects_bcast_group_src_global
# class: objects
# names: groups
# world: 4
# culprits: 1,3
# cause: dist.broadcast_object_list, line 29
# nccl: yes
"""Sequence-parallel groups [0, 2] and [1, 3]: the group leader (the group's first member) broadcasts the batch
metadata to its group. The code first maps the leader to its global rank with get_global_rank(group, 0) and then
passes that number as group_src, which torch reads as a rank INSIDE the group. For [0, 2] the leader's global rank
0 is also its group rank, so nothing shows; for [1, 3] global rank 1 read as group rank 1 selects global rank 3, so
rank 3's metadata silently overwrites the leader's on ranks 1 and 3. From:
https://github.com/vllm-project/vllm-omni/pull/6264"""
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
    dist.broadcast_object_list(box, group_src=leader, group=sp_group)
    meta = box[0]
    assert meta["sender"] == leader, (
        f"rank {rank}: got metadata from rank {meta['sender']}, expected leader {leader}")
    print(f"rank {rank}: seq_len {meta['seq_len']} from leader {leader}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
