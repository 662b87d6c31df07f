"""group-order: ranks create the model-parallel process groups in different orders.

Source: a real report (initialising tensor- and sequence-parallel groups in a Megatron-style
`initialize_model_parallel`). PyTorch's `new_group` docstring (torch/distributed/distributed_c10d.py) states the
rule: every process enters it, even for groups it is not a member of, and groups are created in the same order in
all processes.

Symptom: start-up hangs while the model-parallel groups are created; the per-rank "Before X" / "After X" log
lines show every rank stuck between a "Before new_group" and its "After".

Root cause: `new_group` is a call every rank must make, for every group (members or not), in the same order: the
k-th call gets the k-th group name on every rank (a counter: torch/distributed/distributed_c10d.py,
`_process_group_name`), and the members rendezvous in the store under that name. Here ranks 2-3 set up the
sequence-parallel groups before the tensor-parallel ones, so their call #1 is `new_group([0, 2])` while ranks 0-1
make call #1 `new_group([0, 1])`: under one name, two different groups try to connect, and their members wait for
peers that are creating something else. With disjoint groups the same mistake can even "work" and silently wire rank
0 to the wrong peers. Creating only the groups a rank belongs to breaks the same rule.

Fix: build every group on every rank, in one order computed the same way everywhere; put a barrier between the
stages (TP groups, SP groups, SP setup) so a mismatch shows up at the stage that caused it.

On GPUs (NCCL): every `new_group` returns at once on every rank (NCCL communicators are created lazily, at a
group's first collective), so the run gets past group creation and hangs later, at the first collective on a
mismatched group: here the sequence-parallel `all_gather_object`, after "Before sequence-parallel setup". The
sandbox still names the new_group call that created the groups differently.

Run: python -m sandbox.repro group-order
    broken: HANG [group_mismatch]: 4 ranks in 2.27 s
      The ranks created process groups differently at their new_group call #1: ranks 0 and 1 created [0, 1];
      ranks 2 and 3 created [0, 2]. Every rank must call every new_group, with the same ranks, in the same
      order (group names come from that order), so these groups never connect.
      Warnings: group_mismatch.
      expected: hang, group_mismatch, culprits [2, 3] -> as documented
    fixed: OK: 4 ranks in 1.30 s
      expected: ok, = single-process reference -> as documented
"""
import torch.distributed as dist

from sandbox.bugs import Bug, Expect, Gpu, init

BUG = Bug(
    slug="group-order", title="new_group called in a different order on some ranks",
    source="model-parallel group initialisation (a real report; torch/distributed/distributed_c10d.py, new_group)",
    symptom="initialisation of model-parallel groups hangs between 'Before new_group' and 'After new_group'",
    world_size=4, min_world_size=4, needs="cpu",
    broken=Expect("hang", "group_mismatch", [2, 3], output=r"Before new_group tp"),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect("hang", "group_mismatch", output=r"Before sequence-parallel setup"),
            fixed=Expect("ok", matches_reference=True), min_world_size=4))

TP = 2


def groups(world):
    tp_groups = [list(range(s, s + TP)) for s in range(0, world, TP)]           # [0, 1], [2, 3]
    sp_groups = [list(range(i, world, TP)) for i in range(TP)]                    # [0, 2], [1, 3]
    return tp_groups, sp_groups


def make(name, ranks):
    rank = dist.get_rank()
    print(f"[rank {rank}] Before new_group {name} {ranks}", flush=True)
    g = dist.new_group(ranks)
    print(f"[rank {rank}] After new_group {name} {ranks}", flush=True)
    return g if rank in ranks else None


def initialize_model_parallel(same_order):
    init()  # gloo on CPU; NCCL with --gpu, and new_group's groups with it
    rank, world = dist.get_rank(), dist.get_world_size()
    tp_groups, sp_groups = groups(world)
    stages = [("tp", tp_groups), ("sp", sp_groups)]
    if not same_order and rank >= world // 2:
        stages.reverse()  # BUG: the second half of the ranks sets up sequence parallelism first
    mine = {}
    for name, stage in stages:
        for ranks in stage:
            g = make(name, ranks)
            if g is not None:
                mine[name] = g
    dist.barrier()
    print(f"[rank {rank}] Before sequence-parallel setup", flush=True)
    seq_lens = [None] * len(dist.get_process_group_ranks(mine["sp"]))
    dist.all_gather_object(seq_lens, {"rank": rank, "seq_len": 128 * (rank + 1)}, group=mine["sp"])
    print(f"[rank {rank}] After sequence-parallel setup", flush=True)
    out = {"tp": dist.get_process_group_ranks(mine["tp"]), "sp": dist.get_process_group_ranks(mine["sp"]),
           "sp_seq_lens": [s["seq_len"] for s in seq_lens]}
    dist.destroy_process_group()
    return out


def broken():
    return initialize_model_parallel(same_order=False)


def fixed():
    return initialize_model_parallel(same_order=True)  # FIX: every rank, every group, one order


def reference(world_size):
    tp_groups, sp_groups = groups(world_size)
    per_rank = []
    for r in range(world_size):
        sp = next(g for g in sp_groups if r in g)
        per_rank.append({"tp": next(g for g in tp_groups if r in g), "sp": sp, "sp_seq_lens": [128 * (m + 1) for m in sp]})
    return {"per_rank": per_rank}
