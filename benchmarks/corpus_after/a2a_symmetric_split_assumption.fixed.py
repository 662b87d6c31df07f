# case: a2a_symmetric_split_assumption
# fixed: exchange the split sizes first (all_to_all_single of the counts) and use the received counts as output splits
# world: 4
# nccl: yes
"""MoE token dispatch: each rank routes its tokens evenly to the four expert ranks with all_to_all_single. The ranks
first exchange how many rows each will send to each peer, and use those counts as output_split_sizes, so rank 3's
larger batch is received into slots of the right size. From: https://github.com/pytorch/pytorch/issues/117486"""
import datetime

import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=10)
BATCH_TOKENS = [4, 4, 4, 8]
HIDDEN = 8


def main():
    dist.init_process_group("gloo", timeout=TIMEOUT)
    rank = dist.get_rank()
    world = dist.get_world_size()
    per_expert = BATCH_TOKENS[rank] // world
    tokens = torch.full((BATCH_TOKENS[rank], HIDDEN), float(rank))
    input_splits = [per_expert] * world
    recv_counts = torch.empty(world, dtype=torch.int64)
    dist.all_to_all_single(recv_counts, torch.tensor(input_splits, dtype=torch.int64))
    output_splits = recv_counts.tolist()
    received = torch.empty(sum(output_splits), HIDDEN)
    dist.all_to_all_single(received, tokens, output_splits, input_splits)
    expected_rows = sum(BATCH_TOKENS[src] // world for src in range(world))
    assert received.shape[0] == expected_rows, f"rank {rank}: {received.shape[0]} rows != {expected_rows}"
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
