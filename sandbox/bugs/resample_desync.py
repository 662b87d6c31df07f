"""resample-desync: in dynamic sampling, each rank decides on its own whether to fetch another batch.

Source: a real report from an RL trainer with dynamic sampling (generated groups
whose rewards are all equal carry no signal and are filtered out; the trainer generates more until it has a full
batch).

Symptom: the step deadlocks (in the real report: a dataloader/collective deadlock and uneven memory across ranks).

Root cause: "do I have enough samples?" is answered per rank. Generation involves collectives (here: rank 0
broadcasts the next prompt batch, as a dataloader with a shared sampler does), so a rank that decides to resample
calls broadcast while a rank that decided it is done calls all_gather_object to build the global pool. Same call
number, different collectives: a collective mismatch.

Fix: decide on the global count (all_reduce the kept samples), so all ranks resample together; then gather
everything into one global pool of 64 and let each rank slice its 16.

On GPUs (NCCL): the same mismatch (resampling ranks broadcast, finished ranks all_gather_object), but the
calls are queued on the GPU and return to Python; the ranks then wait in CUDA for kernels that never finish. The
sandbox names it from the calls still in flight. (Both backends need 4 ranks: with 2, this data happens to reach
the batch in the same round on every rank.)

Run: python -m sandbox.repro resample-desync
    broken: HANG [collective_mismatch]: 4 ranks in 1.30 s
      Collective mismatch at call #3 of group [0, 1, 2, 3]: ranks 0-2 call all_gather_object() at
      sandbox/bugs/resample_desync.py:86; rank 3 calls broadcast(shape [12], int64, root 0) at
      sandbox/bugs/resample_desync.py:63. The op/shape/dtype must be the same on every rank of the group.
      expected: hang, collective_mismatch -> as documented
    fixed: OK: 4 ranks in 1.25 s
      expected: ok, = single-process reference -> as documented
"""

import torch
import torch.distributed as dist

from sandbox.bugs import Bug, Expect, Gpu, init

BUG = Bug(
    slug="resample-desync", title="Dynamic sampling: ranks decide locally to resample",
    source="dynamic sampling in an RL trainer (a real report)",
    symptom="the training step deadlocks while some ranks resample and others build the pool",
    world_size=4, min_world_size=4, needs="cpu",
    broken=Expect("hang", "collective_mismatch", note="resampling ranks broadcast, finished ranks all_gather_object"),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect("hang", "collective_mismatch"), fixed=Expect("ok", matches_reference=True),
            min_world_size=4))

GLOBAL_BATCH = 64
PROMPTS_PER_ROUND = 12


def generate(rank, round_, prompts):
    """A deterministic stand-in for rollouts: (prompt, reward spread); spread 0 means all rewards were equal."""
    g = torch.Generator().manual_seed(7919 * round_ + 31 * rank + 1)
    spread = (torch.rand(len(prompts), generator=g) * 4).floor() / 3  # a quarter of the groups are uniform
    return [(int(p), round(float(s), 4)) for p, s in zip(prompts, spread)]


def next_prompts(round_, device="cpu"):
    if dist.get_rank() == 0:
        prompts = torch.arange(round_ * PROMPTS_PER_ROUND, (round_ + 1) * PROMPTS_PER_ROUND, device=device)
    else:
        prompts = torch.empty(PROMPTS_PER_ROUND, dtype=torch.int64, device=device)
    dist.broadcast(prompts, src=0)  # the shared sampler: every rank gets this round's prompts
    return prompts.tolist()


def dynamic_sampling(global_decision):
    device = init()  # gloo on CPU; NCCL with --gpu
    rank, world = dist.get_rank(), dist.get_world_size()
    per_rank = GLOBAL_BATCH // world
    kept, round_ = [], 0
    while True:
        batch = generate(rank, round_, next_prompts(round_, device))
        kept += [s for s in batch if s[1] > 0]  # filter groups with no reward signal
        round_ += 1
        if global_decision:
            total = torch.tensor([len(kept)], device=device)
            dist.all_reduce(total)  # FIX: one decision for all ranks, on the global count
            enough = total.item() >= GLOBAL_BATCH
        else:
            enough = len(kept) >= per_rank  # BUG: a local decision; other ranks may still resample
        print(f"rank {rank}: round {round_}: kept {len(kept)} -> {'enough' if enough else 'resample'}")
        if enough:
            break
    pool = [None] * world
    dist.all_gather_object(pool, kept)  # the global pool
    pool = sorted(s for per in pool for s in per)[:GLOBAL_BATCH]
    share = pool[rank * per_rank:(rank + 1) * per_rank]
    dist.destroy_process_group()
    return share


def broken():
    return dynamic_sampling(global_decision=False)


def fixed():
    return dynamic_sampling(global_decision=True)


def reference(world_size):
    """The same sampling in one process: rounds until the global count is reached, then the same slicing."""
    kept, round_ = {r: [] for r in range(world_size)}, 0
    while sum(len(k) for k in kept.values()) < GLOBAL_BATCH:
        prompts = list(range(round_ * PROMPTS_PER_ROUND, (round_ + 1) * PROMPTS_PER_ROUND))
        for r in range(world_size):
            kept[r] += [s for s in generate(r, round_, prompts) if s[1] > 0]
        round_ += 1
    pool = sorted(s for r in range(world_size) for s in kept[r])[:GLOBAL_BATCH]
    per = GLOBAL_BATCH // world_size
    return {"per_rank": [[list(s) for s in pool[r * per:(r + 1) * per]] for r in range(world_size)]}
