"""kv-sync: after a sequence+pipeline-parallel prefill, every rank sends the KV cache of all its layers at once.

Source: a real report (prefill split over ranks by layers and in sequence chunks, then decoding on every rank,
which needs the whole cache).

Symptom: the run hangs in the cache-sync stage, every rank inside a `send`.

Root cause: a gloo `send` does not return until the peer has posted the matching `recv`, at any size (PyTorch's
`send` is "Send a tensor synchronously", torch/distributed/distributed_c10d.py; examples/send_cycle.py deadlocks
with 8 floats).
"Send the cache of every layer to every peer, then receive theirs" means every rank starts with a send, and
nobody is receiving yet: rank 0 waits for rank 1 to receive, rank 1 waits for rank 0: a cycle.

Fix: go layer by layer. For each layer only its owner sends and every other rank is already waiting in a `recv`
for exactly that layer, so every send finds its receive. Two exchange patterns both pass: `pairwise` (the owner
sends to each peer in turn) and `ring` (the owner sends to its right neighbour, each rank receives from its left
and forwards until the ring closes). Per-layer sync helped not because the messages got smaller but because it
fixed an order in which each blocking send has a posted receive. The deeper rule: with blocking point-to-point,
for every send the matching receive must already be reachable on the peer. Ordering by rank parity (even ranks
send first, odd ranks receive first) is not such an order for every world size: among an odd number of ranks two
even ranks are peers (ranks 0 and 2 of 3) and both send first, which deadlocks again. What holds for any number of
ranks: post both sides of the whole exchange first, every `isend` and every `irecv` (or all of them in one
`batch_isend_irecv`), then wait on every request; or a schedule where, at each step, each pair has one sender and
one receiver, as the per-layer fix has.

The model is a small Qwen-like decoder with random weights (sandbox/models/tiny_qwen.py, plain PyTorch); the
decoded tokens of every rank must equal a single-process run.

On GPUs (NCCL): NCCL's `send` returns to Python at once and runs on the GPU, and on a pair whose connection is
already set up (the prefill's pipeline has sent from rank 0 to rank 1) both ranks' sends and recvs meet there: with
2 ranks (2 GPUs) the broken variant completes, and the sandbox's `send_cycle` warning names what a luckier buffer
forgave. With 3 ranks (4 GPUs) it hangs (HANG in 8.6 s): the prefill connected 0->1 and 1->2 only, and ranks 0 and 2
both send first on a pair never connected. Whether it deadlocks depends on the connection, not the size: measured on
2 H200s with torch 2.11 (benchmarks/nccl_kv_exchange.py), both ranks sending first on a pair already connected both
ways completed at 1 KB, 1 MB and 16 MB; on a fresh communicator it deadlocked at all three (the sandbox names the
cycle in about 5 s); with `device_id` given to init_process_group it hung at 1 KB, raised "unhandled cuda error" at
1 MB and aborted the process (SIGABRT) at 16 MB. The order stays wrong: post both sides first (`batch_isend_irecv`),
or go layer by layer as the fix does.

Run: python -m sandbox.repro kv-sync
    broken: HANG [p2p_cycle]: 3 ranks in 1.42 s
      Point-to-point cycle: rank 0 blocks in send to rank 1 at sandbox/bugs/kv_sync.py:106; rank 1 blocks in
      send to rank 0 at sandbox/bugs/kv_sync.py:106. A gloo send does not complete until the peer posts the
      matching recv, so each waits for the other. Post both sides before waiting on either: isend and irecv
      (or one batch_isend_irecv with both), then wait on every request; that holds for any number of ranks.
      expected: hang, p2p_cycle -> as documented
    fixed: OK: 3 ranks in 1.34 s
      expected: ok, = single-process reference -> as documented
"""
import torch
import torch.distributed as dist

from sandbox.bugs import Bug, Expect, Gpu, init
from sandbox.models.tiny_qwen import Config, TinyQwen, generate

BUG = Bug(
    slug="kv-sync", title="Syncing every layer's KV cache at once deadlocks",
    source="sequence+pipeline-parallel prefill, replicated decode (a real report)",
    symptom="the run hangs in the cache-sync stage, every rank blocked in send",
    world_size=3, min_world_size=2, needs="cpu",
    broken=Expect("hang", "p2p_cycle", note="every rank starts with a blocking send"),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect(("ok", "hang"), warns="send_cycle",
                          note="2 ranks complete: the prefill connected their pair; with 3 or more, a pair it never "
                               "connected deadlocks"),
            fixed=Expect("ok", matches_reference=True)))

PROMPT = [3, 17, 42, 8, 99, 23, 5, 61, 77, 12, 150, 9]
CHUNK, STEPS, SEED = 4, 8, 0


def owners(world, layers):
    per = -(-layers // world)
    return {layer: layer // per for layer in range(layers)}


@torch.no_grad()
def prefill(model, rank, world, mine):
    """Pipeline over layers, chunks of the sequence flowing through it: rank r runs its layers on chunk c while
    rank r-1 already runs chunk c+1."""
    cache, h, device = {}, None, model.embed.weight.device
    for start in range(0, len(PROMPT), CHUNK):
        n = len(PROMPT[start:start + CHUNK])
        if rank == 0:
            h = model.embed(torch.tensor(PROMPT[start:start + CHUNK], device=device))
        else:
            h = torch.empty(n, model.c.dim, device=device)
            dist.recv(h, src=rank - 1)
        h = model.layers_forward(h, mine, cache, start)
        if rank < world - 1:
            dist.send(h, dst=rank + 1)
    token = torch.tensor([model.next_token(h) if rank == world - 1 else 0], device=device)
    dist.broadcast(token, src=world - 1)  # the last stage picks the first new token
    return cache, token.item()


def _buffers(model, n):
    hd, device = model.c.dim // model.c.heads, model.embed.weight.device
    return torch.empty(model.c.kv_heads, n, hd, device=device), torch.empty(model.c.kv_heads, n, hd, device=device)


def sync_all_at_once(model, cache, rank, world, own):
    peers = [p for p in range(world) if p != rank]
    for p in peers:  # BUG: every rank sends first; a gloo send waits for a recv nobody has posted yet
        for layer in sorted(cache):
            dist.send(cache[layer][0], dst=p)
            dist.send(cache[layer][1], dst=p)
    for p in peers:
        for layer in [la for la, o in own.items() if o == p]:
            k, v = _buffers(model, len(PROMPT))
            dist.recv(k, src=p)
            dist.recv(v, src=p)
            cache[layer] = (k, v)


def sync_layer(model, cache, layer, owner, rank, world, strategy):
    """FIX: one layer at a time; only the owner sends, everybody else is already in the matching recv."""
    if strategy == "pairwise":
        if rank == owner:
            for p in range(world):
                if p != rank:
                    dist.send(cache[layer][0], dst=p)
                    dist.send(cache[layer][1], dst=p)
        else:
            k, v = _buffers(model, len(PROMPT))
            dist.recv(k, src=owner)
            dist.recv(v, src=owner)
            cache[layer] = (k, v)
    else:  # ring: owner -> right neighbour -> ... until the ring closes
        right, left = (rank + 1) % world, (rank - 1) % world
        if rank != owner:
            k, v = _buffers(model, len(PROMPT))
            dist.recv(k, src=left)
            dist.recv(v, src=left)
            cache[layer] = (k, v)
        if right != owner:
            dist.send(cache[layer][0], dst=right)
            dist.send(cache[layer][1], dst=right)


@torch.no_grad()
def decode(model, cache, first):
    out = [first]
    for _ in range(STEPS - 1):
        start = len(PROMPT) + len(out) - 1
        token = torch.tensor(out[-1:], device=model.embed.weight.device)
        h = model.layers_forward(model.embed(token), range(model.c.layers), cache, start)
        out.append(model.next_token(h))
    return out


def _setup():
    device = init()  # gloo on CPU; NCCL with --gpu, the model and its cache on this rank's GPU
    rank, world = dist.get_rank(), dist.get_world_size()
    model = TinyQwen(Config(), seed=SEED).to(device)
    own = owners(world, model.c.layers)
    return model, rank, world, own, [layer for layer, o in own.items() if o == rank]


def broken():
    model, rank, world, own, mine = _setup()
    cache, first = prefill(model, rank, world, mine)
    print(f"rank {rank}: prefill done for layers {mine}; syncing the cache of all layers at once")
    sync_all_at_once(model, cache, rank, world, own)
    tokens = decode(model, cache, first)
    dist.destroy_process_group()  # reached where the backend buffered the sends (NCCL, 2 ranks)
    return tokens


def fixed():
    model, rank, world, own, mine = _setup()
    cache, first = prefill(model, rank, world, mine)
    tokens = {}
    for strategy in ("pairwise", "ring"):
        synced = {layer: kv for layer, kv in cache.items()}
        for layer in range(model.c.layers):
            sync_layer(model, synced, layer, own[layer], rank, world, strategy)
        tokens[strategy] = decode(model, synced, first)
        print(f"rank {rank}: {strategy} sync, decoded {tokens[strategy]}")
    dist.destroy_process_group()
    return tokens


def reference(world_size):
    tokens = generate(TinyQwen(Config(), seed=SEED), PROMPT, STEPS)
    return {"pairwise": tokens, "ring": tokens}
