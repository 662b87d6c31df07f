# case: a2a_symmetric_split_assumption
# class: all_to_all
# names: mismatch
# world: 4
# culprits: 3
# cause: dist.all_to_all_single, line 33
# nccl: yes
"""MoE token dispatch: each rank routes its tokens evenly to the four expert ranks with all_to_all_single. The code
passes its own input_split_sizes as output_split_sizes, assuming every peer sends it as many rows as it sends that
peer. That holds while all ranks have equal batches; rank 3 has a batch twice as large, so it sends 2 rows to each
peer while ranks 0-2 posted 1-row receive slots for it, and gloo aborts those ranks with a size mismatch.
output_split_sizes[i] must equal what rank i sends here, i.e. the transpose of the peers' input splits. From:
https://github.com/pytorch/pytorch/issues/117486"""
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
    output_splits = list(input_splits)
    received = torch.empty(sum(output_splits), HIDDEN)
    dist.all_to_all_single(received, tokens, output_splits, input_splits)
    expected_rows = sum(BATCH_TOKENS[src] // world for src in range(world))
    assert received.shape[0] == expected_rows, f"rank {rank}: {received.shape[0]} rows != {expected_rows}"
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
