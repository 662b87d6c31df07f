# case: missing_filtered_batch_continue
# class: missing_ranks
# names: missing_ranks
# world: 3
# culprits: 1
# cause: dist.all_reduce, line 56
# nccl: yes
"""filtered_batch_continue -- per-rank `continue` on a batch that filtering empties.

Report: NVIDIA-NeMo/Automodel PR #2468, "keep DFlash DDP ranks in lockstep on
no-valid-anchor skips" (https://github.com/NVIDIA-NeMo/Automodel/pull/2468).
The trainer caught "every sample in this micro-batch is too short" and did a
per-rank `continue`, so that rank skipped the gradient all-reduce its peers made.
(Re-authored: the gradient sync here is a plain dist.all_reduce, not DDP.)

Mistake: rank 1's third batch holds only samples shorter than MIN_LEN; it
`continue`s past the all_reduce. Its next all_reduce pairs with the peers'
third one, so the averages mix steps; when rank 1 leaves the loop, ranks 0 and 2
are still waiting in their fourth all_reduce.
torchrun shows: rank 1 prints a WRONG line and exits 0; ranks 0/2 fail in
all_reduce with gloo "Connection closed by peer" (or "Read error ... Connection
reset by peer"); ChildFailedError blames rank 0 or 2, never rank 1.
"""
import datetime

import torch
import torch.distributed as dist

MIN_LEN = 4  # a sample shorter than one block cannot be trained on
BATCHES = {  # per-rank sample lengths, step by step (deterministic)
    0: [[5, 6], [7, 4], [8, 9], [4, 4]],
    1: [[6, 5], [9, 8], [2, 3], [5, 7]],
    2: [[4, 8], [6, 6], [7, 5], [9, 4]],
}


def expected_weight():
    w = 0.0
    for step in range(4):
        usable = [n for r in BATCHES for n in BATCHES[r][step] if n >= MIN_LEN]
        w -= 0.01 * sum(usable) / len(usable)
    return w


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 3, "run with --nproc-per-node 3"
    w = torch.zeros(1, dtype=torch.float64)
    for step, batch in enumerate(BATCHES[rank]):
        usable = [n for n in batch if n >= MIN_LEN]
        if not usable:
            print(f"[rank {rank}] step {step}: no valid sample, skipping batch", flush=True)
            continue  # BUG: peers still make the all_reduce below
        grad = torch.tensor([float(sum(usable)), float(len(usable))], dtype=torch.float64)
        dist.all_reduce(grad)  # sum of per-sample "gradients" and sample count
        w -= 0.01 * grad[0] / grad[1]
    if abs(w.item() - expected_weight()) > 1e-9:
        print(f"WRONG [rank {rank}] weight {w.item():.6f} != expected {expected_weight():.6f}", flush=True)
    else:
        print(f"[rank {rank}] weight {w.item():.6f} OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
