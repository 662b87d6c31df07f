"""aux-data: the embedding side writes request metadata into the first block of its allocation only; every TP
rank of the language side reads its own first block.

Source: a real report from disaggregated serving: an embedding worker hands a request's embeddings and metadata to
a 4-way tensor-parallel language worker through a shared block pool.

Symptom: TP1 and TP3 log `Unexpected: Transferring status but sent_tokens=0 >= actual_total_length=0`
and keep polling, TP0 and TP2 resume; the run then fails at the next status sync (a collective mismatch: the
resumed ranks all_gather their first token while the others are still in the poll's all_reduce).

Root cause: the request's allocation is two runs of 16 blocks (blocks 0-15 and 16-31). The sender writes the
metadata (sent_tokens, actual_total_length) only into the first block of each run. TP rank r reads block 8*r:
TP0 reads block 0 and TP2 block 16 (metadata), TP1 block 8 and TP3 block 24 (zeros). (A run always spans two TP
ranks' slices, so with 2 ranks TP1 reads zeros; with any even TP size the odd ranks do.) The poll status is
synced with all_reduce, so every rank sees "transfer done", but each then checks its own metadata: half of them
find zeros and disagree with the others about what happens next.

Fix: all_reduce(MAX) `actual_total_length` and `sent_tokens` over a gloo group right after reading; ranks without
metadata take part with placeholders (their zeros), so every rank sees the real values, runs the same steps and
resumes.

On GPUs (NCCL): the same mismatch, named the same way, but NCCL hangs in the GPU stream, not in Python: the
status all_reduce and the token all_gather are queued and return at once, and the ranks then wait in `.item()`
for kernels that never finish (or, with 2 ranks, in `destroy_process_group` behind a peer's unfinished call).
The sandbox sees it from the calls still in flight on the GPU.

Run: python -m sandbox.repro aux-data
    broken: HANG [collective_mismatch]: 4 ranks in 1.43 s
      Collective mismatch at call #2 of group [0, 1, 2, 3]: ranks 0 and 2 call all_gather(shape [1], int64) at
      sandbox/bugs/aux_data.py:91; ranks 1 and 3 call all_reduce(shape [1], int64) at
      sandbox/bugs/aux_data.py:82. The op must be the same on every rank of the group.
      expected: hang or crash, collective_mismatch, culprits odd -> as documented
    fixed: OK: 4 ranks in 1.40 s
      expected: ok, = single-process reference -> as documented
"""

import torch
import torch.distributed as dist

from sandbox.bugs import Bug, Expect, Gpu, init

BUG = Bug(
    slug="aux-data", title="Metadata in the first block only: half the TP ranks read zeros",
    source="embedding -> language handoff in disaggregated serving (a real report)",
    symptom="TP1/TP3: Unexpected: Transferring status but sent_tokens=0 >= actual_total_length=0",
    world_size=4, min_world_size=2, needs="cpu",
    broken=Expect(("hang", "crash"), "collective_mismatch", "odd",
                  output=r"Unexpected: Transferring status but sent_tokens=0 >= actual_total_length=0"),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect(("hang", "crash"), "collective_mismatch", "odd",
                          output=r"Unexpected: Transferring status but sent_tokens=0 >= actual_total_length=0"),
            fixed=Expect("ok", matches_reference=True)))

BLOCKS, TP, TP_SLICES_PER_RUN = 32, 4, 2  # the report's TP size; any even size shows the bug
TRANSFERRING, SUCCESS = 1, 2
PROMPT_TOKENS = 37


def embedding_side(tp_size=TP):
    """The sender: the request's embeddings fill all blocks; its metadata goes to the first block of each run
    (a run spans the slices of two TP ranks: blocks 0-15 and 16-31 with TP=4)."""
    meta = torch.zeros(BLOCKS, 2, dtype=torch.int64)  # per block: (sent_tokens, actual_total_length)
    for first in range(0, BLOCKS, TP_SLICES_PER_RUN * BLOCKS // tp_size):
        meta[first] = torch.tensor([PROMPT_TOKENS, PROMPT_TOKENS])  # BUG (sender): first block of the run only
    return BlockPool(meta)


def language_side(sync_metadata):
    device = init()  # gloo on CPU; NCCL with --gpu, where the TP syncs run on the GPU
    tp, tp_size = dist.get_rank(), dist.get_world_size()
    cpu_group = dist.new_group(list(range(tp_size)), backend="gloo")
    tp_group = cpu_group if device.type == "cpu" else None  # the TP group: the NCCL world under --gpu
    block = tp * (BLOCKS // tp_size)  # each TP rank reads the first block of its own slice
    sent_tokens, actual_total_length = (int(v) for v in embedding_side(tp_size)[block])
    if sync_metadata:  # FIX: every rank takes part; ranks without metadata bring their zeros as placeholders
        meta = torch.tensor([sent_tokens, actual_total_length])
        dist.all_reduce(meta, op=dist.ReduceOp.MAX, group=cpu_group)
        sent_tokens, actual_total_length = (int(v) for v in meta)
    print(f"TP{tp}: block {block}: sent_tokens={sent_tokens} actual_total_length={actual_total_length}")
    for poll in range(3):
        status = torch.tensor([SUCCESS], device=device)  # the transfer engine reports the pages as delivered
        dist.all_reduce(status, op=dist.ReduceOp.MIN, group=tp_group)  # the poll status sync
        done = status.item() == SUCCESS and actual_total_length > 0 and sent_tokens >= actual_total_length
        if done:
            break
        print(f"TP{tp}: Unexpected: Transferring status but sent_tokens={sent_tokens} >= "
              f"actual_total_length={actual_total_length}", flush=True)
    print(f"TP{tp}: resume with {actual_total_length} prompt tokens", flush=True)
    token = torch.tensor([actual_total_length * 7 % 101], device=device)  # stand-in for the first decoded token
    tokens = [torch.zeros(1, dtype=token.dtype, device=device) for _ in range(tp_size)]
    dist.all_gather(tokens, token, group=tp_group)  # the next sync after resuming: every TP rank's first token
    first_tokens = [t.item() for t in tokens]
    dist.destroy_process_group()
    return {"sent_tokens": sent_tokens, "actual_total_length": actual_total_length, "first_tokens": first_tokens}


def broken():
    return language_side(sync_metadata=False)


def fixed():
    return language_side(sync_metadata=True)


def reference(world_size):
    return {"sent_tokens": PROMPT_TOKENS, "actual_total_length": PROMPT_TOKENS,
            "first_tokens": [PROMPT_TOKENS * 7 % 101] * world_size}


# ------------------------------------------------------------------------------------ the lab's rules (lab 07)
# The reference cannot tell a fix from a shortcut where every rank reads block 0 (which holds the metadata) and
# nothing is communicated: both return the right values. On the real system a TP rank can read only its own slice
# of the pool, so the shortcut would not exist; the pool below notes each block a rank reads, and the lab's rules
# hold a learner's fix to what the system allows.

class BlockPool:
    """The block pool as the language side sees it: `pool[block]` is that block's row (sent_tokens,
    actual_total_length). Every block read is noted in the rank's trace (`sandbox.lab.note`), for LAB_RULES."""

    def __init__(self, meta):
        self.meta = meta

    def __len__(self):
        return len(self.meta)

    def __getitem__(self, index):
        from sandbox import lab  # imported on first read: the lab module is not needed to define the bug

        rows = index[0] if isinstance(index, tuple) else index  # pool[b] or pool[b, 0]: the block is the row
        read = range(len(self.meta))[rows if isinstance(rows, slice) else int(rows)]  # IndexError past the end
        for b in read if isinstance(read, range) else [read]:
            lab.note(read_block=b)
        return self.meta[index]

    def __iter__(self):
        return (self[b] for b in range(len(self.meta)))


def _slice(rank, world_size):
    per = BLOCKS // world_size
    return range(rank * per, (rank + 1) * per)


def _reads_outside_own_slice(res):
    """What broke "a rank reads only its own slice", or None: the ranks that read another rank's block or none."""
    from sandbox import lab

    notes, broke = lab.notes(res), []
    for rank in range(res.world_size):
        read = sorted({n["read_block"] for n in notes.get(rank, []) if "read_block" in n})
        own = _slice(rank, res.world_size)
        outside = [b for b in read if b not in own]
        if outside:
            broke.append(f"rank {rank} read block{'s' if len(outside) > 1 else ''} {', '.join(map(str, outside))}"
                         f" (its slice is blocks {own[0]}-{own[-1]})")
        elif not read:
            broke.append(f"rank {rank} read no block of the pool")
    return "; ".join(broke) or None


def _lab_rules():
    from sandbox import lab

    return [lab.Rule(says="a rank reads only its own slice of the block pool", found=_reads_outside_own_slice),
            # the poll's status all_reduce and the token all_gather are 2 calls; the metadata needs one more
            lab.communicates(min_calls=3, says="the ranks must communicate the metadata (a call that moves it, "
                                               "besides the poll's all_reduce and the token all_gather)")]


LAB_RULES = _lab_rules
