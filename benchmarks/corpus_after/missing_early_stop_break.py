# case: missing_early_stop_break
# class: missing_ranks
# names: missing_ranks
# world: 3
# culprits: 2
# cause: dist.all_reduce, line 43
# nccl: yes
"""early_stop_break -- a per-rank early-stopping `break` out of the epoch loop.

Report: Lightning-AI/pytorch-lightning issue #379, "Early stopping with ddp bug"
(https://github.com/Lightning-AI/pytorch-lightning/issues/379): "if the stop
condition is met in one or more subprocess but not in all subprocess, the
corresponding subprocess are stop but the others ones are still running and the
training hangs." (Same shape: netket/netket#651.)

Mistake: each rank judges patience on its OWN validation loss. Rank 2's local
loss stops improving after epoch 1, so at epoch 3 it `break`s and goes to the
final all_gather of weights, while ranks 0 and 1 start epoch 4 and call the
gradient all_reduce. An all_gather on one rank against an all_reduce on the others never
completes.
torchrun shows: after 10 s every rank fails with gloo "Timed out waiting 10000ms
for send operation to complete" (one rank: "... for recv ..."); ChildFailedError.
"""
import datetime

import torch
import torch.distributed as dist

PATIENCE = 2
# validation loss each rank measures on its own shard, per epoch (deterministic)
VAL_LOSS = {0: [0.9, 0.8, 0.7, 0.6, 0.5, 0.4], 1: [0.8, 0.7, 0.65, 0.6, 0.55, 0.5],
            2: [0.7, 0.6, 0.61, 0.62, 0.63, 0.64]}


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 3, "run with --nproc-per-node 3"
    w = torch.zeros(4)
    best, bad_epochs = float("inf"), 0
    for epoch, val in enumerate(VAL_LOSS[rank]):
        grad = torch.full((4,), float(rank + 1 + epoch))
        dist.all_reduce(grad)  # data-parallel gradient average
        w -= 0.1 * grad / world
        if val < best:
            best, bad_epochs = val, 0
        else:
            bad_epochs += 1
        stop = bad_epochs >= PATIENCE
        if stop:
            print(f"[rank {rank}] epoch {epoch}: no improvement for {PATIENCE} epochs, stopping", flush=True)
            break  # BUG: decided from this rank's own val loss only
    gathered = [torch.empty(4) for _ in range(world)]
    dist.all_gather(gathered, w)  # checkpoint sanity check: replicas must agree
    if any(not torch.equal(g, w) for g in gathered):
        print(f"WRONG [rank {rank}] replicas diverged: {[g[0].item() for g in gathered]}", flush=True)
    else:
        print(f"[rank {rank}] stopped at epoch {epoch}, replicas agree", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
