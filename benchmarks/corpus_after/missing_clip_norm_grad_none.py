# case: missing_clip_norm_grad_none
# class: missing_ranks
# names: missing_ranks
# world: 2
# culprits: 1
# cause: dist.all_reduce, line 36
# nccl: yes
"""clip_norm_grad_none -- grad-norm clipping all_reduces the expert norm only if grads exist.

Report: https://github.com/deepspeedai/DeepSpeed/pull/8478 ("Count each expert once
in the fp32 gradient-clipping norm"): review found a hang because "an unused
expert on one rank" made it "choose a different collective from the others"
(ownership read "after `p.grad is not None` filtering"; case "rank1's expert got
no tokens"). Re-authored with a plain dist.all_reduce.

Mistake: each rank owns one expert (expert parallel). At step 1 no token of
rank 1's batch is routed to its expert, so the expert's .grad stays None and
clip_grad_norm() skips the expert-norm all_reduce. Rank 1's next collective (the
20-element dense-gradient all_reduce of step 2) meets rank 0's scalar norm one.
torchrun shows: gloo aborts innocent rank 0 (SIGABRT) with "EnforceNotMet ... Received
data size doesn't match expected size. Is there a distributed collective mismatch in
your code?"; rank 1 gets "Connection reset by peer"; ChildFailedError.
"""
import datetime

import torch
import torch.distributed as dist
from torch import nn


def clip_grad_norm(dense, expert, max_norm):
    sq = torch.stack([p.grad.pow(2).sum() for p in dense.parameters()]).sum()
    expert_grads = [p.grad for p in expert.parameters() if p.grad is not None]
    if expert_grads:  # BUG: a rank whose expert got no tokens skips the all_reduce
        esq = torch.stack([g.pow(2).sum() for g in expert_grads]).sum()
        dist.all_reduce(esq)  # sum expert norms over the expert-parallel ranks
        sq = sq + esq
    total = sq.sqrt()
    coef = min(1.0, max_norm / (total.item() + 1e-6))
    for p in list(dense.parameters()) + list(expert.parameters()):
        if p.grad is not None:
            p.grad.mul_(coef)
    return total.item()


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2, "run with --nproc-per-node 2"
    torch.manual_seed(0)
    dense, expert = nn.Linear(4, 4), nn.Linear(4, 4)
    opt = torch.optim.SGD(list(dense.parameters()) + list(expert.parameters()), lr=0.1)
    norms = []
    for step in range(4):
        x = torch.arange(8.0).reshape(2, 4) / 8 - (1.0 if (rank, step) == (1, 1) else 0.0)
        opt.zero_grad(set_to_none=True)
        h = dense(x)
        routed = h[x[:, 0] >= 0]  # tokens the router sends to this rank's expert
        loss = h.pow(2).sum() + (expert(routed).pow(2).sum() if len(routed) else 0.0)
        loss.backward()
        flat = torch.cat([p.grad.flatten() for p in dense.parameters()])
        dist.all_reduce(flat)  # data-parallel average of the replicated dense grads
        torch.nn.utils.vector_to_parameters(flat / world, [p.grad for p in dense.parameters()])
        norms.append(clip_grad_norm(dense, expert, max_norm=1.0))
        opt.step()
    out = [torch.empty(4, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(out, torch.tensor(norms, dtype=torch.float64))
    if not all(torch.allclose(o, out[0]) for o in out):
        print(f"WRONG [rank {rank}] ranks clipped with different norms: {out}", flush=True)
    else:
        print(f"[rank {rank}] grad norms agree: {[round(n, 4) for n in norms]}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
