# case: missing_log_metrics_early_return
# class: missing_ranks
# names: missing_ranks
# world: 2
# culprits: 1
# cause: dist.all_reduce, line 39
# nccl: yes
"""log_metrics_early_return -- a logging helper `return`s early when it has nothing to log.

Report: Lightning-AI/pytorch-lightning PR #19917, "Update docstring for
`self.log` about keys in distributed training"
(https://github.com/Lightning-AI/pytorch-lightning/pull/19917): "A user logged
keys inconsistently across ranks, leading to hangs at the reduction" -- a rank
that logs nothing for a step skips the sync_dist all-reduce its peers make.
(Related, unsure of exact thread: Lightning issue #21409 on mismatched reductions.)

Mistake: log_metrics() returns before its all_reduce when this rank's batch has
no labelled sample. At step 1 rank 1 has none, so its step-2 all_reduce pairs
with rank 0's step-1 one (same shape: silently mixed), and at the last step
rank 0 waits for a peer that has already finished.
torchrun shows: rank 1 prints a WRONG line (its logged mean losses are wrong),
rank 0 fails with gloo "Connection closed by peer" (or "Connection reset by
peer"); ChildFailedError names rank 0.
"""
import datetime

import torch
import torch.distributed as dist

# per-step losses of the LABELLED samples in each rank's eval batch
LOSSES = {0: [[0.5, 0.7], [0.4], [0.3, 0.2], [0.6]],
          1: [[0.9, 0.1], [], [0.5, 0.5], [0.4, 0.2]]}


def log_metrics(step, losses, history):
    if not losses:
        return  # BUG: "nothing to log" on this rank, but peers all_reduce below
    stats = torch.tensor([sum(losses), float(len(losses))], dtype=torch.float64)
    dist.all_reduce(stats)  # sync_dist: global sum of losses and sample count
    mean = stats[0].item() / stats[1].item()
    history.append(round(mean, 9))
    if dist.get_rank() == 0:
        print(f"step {step}: eval/loss={mean:.4f}", flush=True)


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2, "run with --nproc-per-node 2"
    history = []
    for step, losses in enumerate(LOSSES[rank]):
        log_metrics(step, losses, history)
    expected = []
    for step in range(4):
        allv = [v for r in LOSSES for v in LOSSES[r][step]]
        expected.append(round(sum(allv) / len(allv), 9))
    if history != expected:
        print(f"WRONG [rank {rank}] logged {history} expected {expected}", flush=True)
    else:
        print(f"[rank {rank}] logged means OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
