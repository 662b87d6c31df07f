"""moe-all-to-all-splits: MoE token routing whose count exchange and token send use different counts: on the
rank where an expert overflows its capacity, the send splits are stale.

Source: the expert-parallel dispatch of a mixture-of-experts layer (`all_to_all_single(output, input,
output_split_sizes, input_split_sizes)`, torch/distributed/distributed_c10d.py): every rank first tells every
other rank how many tokens it will send it (an all_to_all of the counts), then sends the tokens with those counts
as its input splits, and receives with the counts it got as its output splits. The pair of split lists is a
contract between every two ranks: what rank a sends to rank b must be what b expects from a.

Symptom: the dispatch's all_to_all_single aborts a rank with SIGABRT: `gloo::EnforceNotMet ... Received data size
doesn't match expected size. Is there a distributed collective mismatch in your code?`, its peers get
`Connection reset by peer` (or the call hangs); only on batches where some expert overflows.

Root cause: each rank routes its 8 tokens to the 4 experts (one per rank), top-1, with a capacity of 3 tokens per
expert from each rank; a token over capacity goes to its next choice. The code counts tokens per expert right after
the router (`counts`), before the capacity step, and uses those counts as the send splits; the count exchange sends
the final counts. Where no expert overflows the two are equal, so ranks 0, 2 and 3 are right; rank 1's batch routes
5 tokens to expert 0, two of them move to expert 3, and rank 1 sends 5 tokens (40 elements of 8 features) to rank 0,
which expects 3 (24 elements), and 1 token to rank 3, which expects 3.

Fix: compute the counts once, from the final routing (after every capacity decision), exchange them with an
all_to_all of the counts, and use exactly those counts as the send splits and the counts received as the receive
splits; the return trip uses the same two lists swapped.

On GPUs (NCCL): NCCL checks no sizes: the rows rank 2 sends beyond what rank 0 expects overrun or are lost, and the
call may complete with tokens in the wrong expert's buffer (wrong outputs, no error), or hang in the GPU stream
until the watchdog's timeout. The sandbox names it from the calls' splits: the same pairs.

Run: python -m sandbox.repro moe-all-to-all-splits
    broken: CRASH [collective_mismatch]: 4 ranks in 2.18 s
      Collective mismatch at call #2 of group [0, 1, 2, 3]: rank 1 calls all_to_all_single(shape [8, 8],
      float32, sends [40, 8, 8, 8], receives [16, 8, 16, 16]) at sandbox/bugs/moe_all_to_all_splits.py:118:
      rank 1 sends 40 elements to rank 0, which expects 24; rank 1 sends 8 elements to rank 3, which expects
      24. What each rank sends to a peer must be what that peer expects to receive from it (the splits). Its
      peers saw: ranks 2 and 3 then lost their connection (Read error [127.0.0.1]:3493: Connection reset by
      peer), a consequence.
      expected: hang or crash, collective_mismatch, culprits [1], error /Received data size doesn't match expected size|which expects/ -> as documented
    fixed: OK: 4 ranks in 1.58 s
      expected: ok, = single-process reference -> as documented
"""
import torch
import torch.distributed as dist

from sandbox.bugs import Bug, Expect, Gpu, init

BUG = Bug(
    slug="moe-all-to-all-splits", title="MoE all_to_all whose send splits disagree with the counts exchanged",
    source="expert-parallel MoE dispatch with all_to_all_single (torch/distributed/distributed_c10d.py)",
    symptom="the MoE dispatch's all_to_all_single aborts with a size mismatch on batches where an expert overflows",
    world_size=4, min_world_size=3, needs="cpu",
    broken=Expect(("hang", "crash"), "collective_mismatch", [1],
                  error=r"Received data size doesn't match expected size|which expects",
                  note="rank 1's send splits are its counts before the capacity step"),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect(("hang", "crash"), "collective_mismatch"),  # on 2 GPUs both ranks' splits disagree
            fixed=Expect("ok", matches_reference=True)))

TOKENS, DIM = 8, 8   # tokens per rank, features per token (the router reads the first world_size: up to 8 ranks)
SKEWED = 1           # the rank whose batch leans on expert 0


def capacity(world):
    """Tokens an expert takes from one rank: 1.25 times a fair share, rounded up (3 of 8 tokens with 4 experts)."""
    return -(-TOKENS * 5 // (4 * world))


def batch(rank, world):
    """This rank's tokens. The first `world` features are what the router reads (a stand-in for a learned gate):
    token i prefers expert `prefs[i]`, then the next one. Rank 1's batch leans on expert 0."""
    g = torch.Generator().manual_seed(rank)
    x = torch.rand(TOKENS, DIM, generator=g) * 0.1
    prefs = [0] * 5 + [1, 2, 3] if rank == SKEWED else [(i + rank) % world for i in range(TOKENS)]
    for i, e in enumerate(prefs):
        x[i, e % world] += 1.0
        x[i, (e - 1) % world] += 0.5  # the second choice: the expert before it
    return x


def route(x, world):
    """Top-1 routing: the expert of each token, before any capacity limit."""
    return x[:, :world].argmax(dim=1)


def apply_capacity(x, expert, world):
    """A token over its expert's capacity goes to its next choice with room (the router's next-best expert)."""
    order = x[:, :world].argsort(dim=1, descending=True)
    taken, limit = [0] * world, capacity(world)
    out = expert.clone()
    for i in range(len(x)):
        e = next(int(c) for c in order[i] if taken[int(c)] < limit)  # 8 tokens always fit: 1.25 x a fair share
        taken[e] += 1
        out[i] = e
    return out


def expert_fn(e, rows):
    """Expert e: a fixed small linear map (the same on every rank and in the reference)."""
    g = torch.Generator().manual_seed(100 + e)
    w = torch.randn(DIM, DIM, generator=g)
    return rows @ w


def moe_layer(variant):
    device = init()  # gloo on CPU; NCCL with --gpu
    rank, world = dist.get_rank(), dist.get_world_size()
    x = batch(rank, world)
    expert = route(x, world)
    counts = torch.bincount(expert, minlength=world)  # tokens per expert, straight from the router
    expert = apply_capacity(x, expert, world)
    final = torch.bincount(expert, minlength=world)  # FIX: the counts of the routing actually sent
    order = expert.argsort(stable=True)  # the tokens grouped by expert: expert 0's first
    send = x[order].to(device)
    got = torch.empty(world, dtype=torch.int64, device=device)
    dist.all_to_all_single(got, final.to(device))  # the count exchange: what each rank will receive from each
    send_splits = (counts if variant == "broken" else final).tolist()  # BUG: counts from before the capacity step
    recv_splits = got.tolist()
    recv = torch.empty(sum(recv_splits), DIM, device=device)
    dist.all_to_all_single(recv, send, output_split_sizes=recv_splits, input_split_sizes=send_splits)
    done = expert_fn(rank, recv.cpu()).to(device)  # this rank's expert on every token routed to it
    back = torch.empty_like(send)
    dist.all_to_all_single(back, done, output_split_sizes=send_splits, input_split_sizes=recv_splits)
    out = torch.empty_like(back)
    out[order] = back  # each token back in its place
    dist.destroy_process_group()
    return out.cpu().tolist()


def broken():
    return moe_layer("broken")


def fixed():
    return moe_layer("fixed")


def reference(world_size):
    """The routed computation in one process: every rank's tokens through the expert the routing chose."""
    outs = []
    for r in range(world_size):
        x = batch(r, world_size)
        expert = apply_capacity(x, route(x, world_size), world_size)
        outs.append(torch.stack([expert_fn(int(e), x[i:i + 1])[0] for i, e in enumerate(expert)]).tolist())
    return {"per_rank": outs}
