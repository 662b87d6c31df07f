# case: p2p_isend_staging_reuse
# class: p2p/unwaited
# names: unwaited
# world: 3
# culprits: 1
# cause: dist.isend, line 35
# nccl: yes
"""Three-stage pipeline, forward only: stage 0 feeds micro-batches to stage 1, stage 1 scales them and forwards them
to stage 2 through one preallocated staging buffer with isend, waiting on all sends only after the loop. An isend
reads its buffer when the transfer actually happens, not when it is posted; stage 2 is slower, so stage 1 has
already overwritten the staging buffer with later micro-batches and stage 2 receives the wrong data (its check fails).
From: https://github.com/pytorch/tutorials/issues/3009
"""
import datetime

import torch
import torch.distributed as dist

MICRO, N = 4, 256 * 1024


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    if rank == 0:
        for mb in range(MICRO):
            dist.send(torch.full((N,), float(mb)), 1)
    elif rank == 1:
        staging = torch.empty(N)  # reused for every micro-batch
        inbox = torch.empty(N)
        works = []
        for mb in range(MICRO):
            dist.recv(inbox, 0)
            torch.mul(inbox, 10.0, out=staging)
            works.append(dist.isend(staging, 2))
        for w in works:
            w.wait()
    else:
        weight = torch.randn(512, 512)
        for mb in range(MICRO):
            for _ in range(20):  # the last stage is the slow one
                weight = torch.tanh(weight @ weight)
            x = torch.empty(N)
            dist.recv(x, 1)
            assert x[0].item() == 10.0 * mb, f"micro-batch {mb} arrived as {x[0].item()}"
        print("rank 2: all micro-batches ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
