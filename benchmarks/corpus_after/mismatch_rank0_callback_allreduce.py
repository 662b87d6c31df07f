# case: mismatch_rank0_callback_allreduce
# class: mismatch/shape
# names: mismatch
# world: 2
# culprits: 0
# cause: dist.all_reduce, line 33
# nccl: yes
"""rank0_callback_allreduce -- a logging callback registered on rank 0 only calls all_reduce.

Report: mosaicml/composer issue #239, "Remove `RankZeroCallback` and
`RankZeroLogger`" (https://github.com/mosaicml/composer/issues/239): rank-zero
callbacks "cannot make any calls to `composer.utils.dist`. This has led to bugs
where the entire training process hangs."

Mistake: the throughput monitor is "just logging", so it is only registered
`if rank == 0`. Its on_step_end all_reduces the token count to report global
throughput, so rank 0 issues one extra all_reduce per step. Rank 0's 1-element
callback all_reduce meets rank 1's 8-element gradient all_reduce of step 1.
torchrun shows: gloo aborts rank 0 with "EnforceNotMet ... op.preamble.length <=
op.nbytes. 8 vs 4. Received data size doesn't match expected size. Is there a
distributed collective mismatch in your code?" (SIGABRT) and rank 1 gets
"Connection reset by peer"; ChildFailedError.
"""
import datetime

import torch
import torch.distributed as dist


class ThroughputMonitor:
    def on_step_end(self, step, ntokens):
        t = torch.tensor([float(ntokens)])
        dist.all_reduce(t)  # global tokens this step
        if dist.get_rank() == 0:
            print(f"step {step}: {t.item():.0f} tokens/step (all ranks)", flush=True)


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2, "run with --nproc-per-node 2"
    callbacks = []
    if rank == 0:
        callbacks.append(ThroughputMonitor())  # BUG: registered on rank 0 only
    w = torch.zeros(8)
    for step in range(4):
        ntokens = 100 * (rank + 1) + step
        grad = torch.full((8,), float(rank + step))
        dist.all_reduce(grad)  # data-parallel gradient average
        w -= 0.1 * grad / world
        for cb in callbacks:
            cb.on_step_end(step, ntokens)
    expected = -0.1 * sum((0 + s + 1 + s) / 2 for s in range(4))
    if not torch.allclose(w, torch.full((8,), expected)):
        print(f"WRONG [rank {rank}] weight {w[0].item():.4f} != {expected:.4f}", flush=True)
    else:
        print(f"[rank {rank}] weight {w[0].item():.4f} OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
