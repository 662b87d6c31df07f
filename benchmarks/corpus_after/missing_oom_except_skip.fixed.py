# case: missing_oom_except_skip
# fixed: the collective is moved out of the try; the rank that ran out of memory contributes a zero gradient
# world: 3
# nccl: yes
"""oom_except_skip (FIXED twin) -- one rank catches a (simulated) OOM and skips the batch's all_reduce.

Report: facebookresearch/fairseq PR #3989, "Fixes OOM bug causing distributed
training jobs to hang" (https://github.com/facebookresearch/fairseq/pull/3989):
"When one of the workers gets a OOM error, it tries to recover with a
`try ... except` statement, but the other workers keep waiting for it, and they
get out of sync." (Also bme-chatbots/dialogue-generation#14.)

Mistake: the try block wraps forward AND the gradient all_reduce. Rank 2's
step-1 batch is too big, forward raises "CUDA out of memory" (simulated), the
except prints a warning and moves on, so rank 2 never reaches that all_reduce.
Its step-2 all_reduce pairs with the peers' step-1 one, and at the end ranks 0
and 1 wait in a last all_reduce that rank 2 never makes.
Fix: the collective is moved out of the try; the OOM rank contributes a zero
gradient and zero batch count to the same all_reduce. torchrun exits 0.
"""
import datetime

import torch
import torch.distributed as dist

MAX_TOKENS = 1000  # what fits in "GPU memory"
TOKENS = {0: [400, 600, 500, 300], 1: [700, 200, 800, 600], 2: [500, 1600, 400, 900]}


def forward_backward(ntokens):
    if ntokens > MAX_TOKENS:  # stands in for the allocator failing on a huge batch
        raise RuntimeError(f"CUDA out of memory. Tried to allocate {ntokens} MiB")
    return torch.tensor([ntokens * 0.001, 1.0], dtype=torch.float64)  # (grad, n_batches)


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 3, "run with --nproc-per-node 3"
    w = 0.0
    for step, ntok in enumerate(TOKENS[rank]):
        try:
            grad = forward_backward(ntok)
        except RuntimeError as e:
            if "out of memory" not in str(e):
                raise
            print(f"[rank {rank}] step {step}: WARNING ran out of memory, zero grad", flush=True)
            grad = torch.zeros(2, dtype=torch.float64)  # FIX: still join the all_reduce
        dist.all_reduce(grad)  # gradient sync across data-parallel ranks
        w -= grad[0].item() / grad[1].item()
    expected = 0.0
    for step in range(4):
        ok = [TOKENS[r][step] * 0.001 for r in TOKENS if TOKENS[r][step] <= MAX_TOKENS]
        expected -= sum(ok) / len(ok)
    if abs(w - expected) > 1e-9:
        print(f"WRONG [rank {rank}] weight {w:.6f} != expected {expected:.6f}", flush=True)
    else:
        print(f"[rank {rank}] weight {w:.6f} OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
