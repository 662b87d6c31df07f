# case: p2p_recv_anysource_wrong_sender
# class: p2p/unmatched
# names: p2p_unmatched
# world: 3
# culprits: 0
# cause: dist.recv, line 32
# nccl: no
"""Rank 0 collects one result shard from each worker, in rank order, into buffers sized for that worker's shard
(3 floats from rank 1, 5 from rank 2). The recv omits src, which torch reads as "from any source", so the first
recv matches whichever worker sends first. Rank 1 spends longer preparing its shard, rank 2's 5-float message
arrives first and is matched to the 3-float buffer meant for rank 1, and gloo aborts rank 0 with a size mismatch.
NCCL has no receive-from-any-source, so there dist.recv without src is rejected outright. From:
https://github.com/pytorch/pytorch/pull/49383 (recv_anysource "can potentially recv from anywhere")"""
import datetime
import time

import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=10)
SHARD_LEN = {1: 3, 2: 5}
PREP_SECONDS = {1: 2.0, 2: 0.0}


def main():
    dist.init_process_group("gloo", timeout=TIMEOUT)
    rank = dist.get_rank()
    if rank == 0:
        shards = {}
        for src in sorted(SHARD_LEN):
            buf = torch.empty(SHARD_LEN[src])
            dist.recv(buf)
            shards[src] = buf
        result = torch.cat([shards[1], shards[2]])
        assert result.tolist() == [1.0] * 3 + [2.0] * 5, f"shards out of place: {result.tolist()}"
        print(f"rank 0: gathered {result.tolist()}", flush=True)
    else:
        time.sleep(PREP_SECONDS[rank])
        dist.send(torch.full((SHARD_LEN[rank],), float(rank)), dst=0)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
