"""Every primitive of the Concepts page, run for real on 4 gloo ranks in one `sandbox.launch`, recorded so that a
picture can be drawn from what the ranks actually held (`sandbox.report.diagrams`), and a test can hold each
picture to its primitive's result.

Why a run and not a formula: a picture drawn from a formula can drift from what torch.distributed does (gloo's
`reduce` leaves partial sums on the non-root ranks, which no formula on the Concepts page says); a picture drawn
from a run cannot, and the test compares the run with a single-process reference as well.

How a picture can tell where data came from: every element a rank starts with is a distinct power of two,
`2 ** (4 * rank + chunk)` (`origin_value`), in int64. A copied element keeps its value, and a sum of distinct
powers of two is their bitwise OR, so any element any rank holds afterwards decodes (`origins`) into exactly the
(rank, chunk) pairs that were summed into it: a copy has one origin, a reduction several.

The ring all-reduce is recorded the same way: a ring made of isend/irecv on the same 4 ranks (reduce-scatter
phase, N-1 steps; then all-gather phase, N-1 steps), each rank noting after every step which chunk it sent where,
which it received, and what it holds; at the end it is compared with `dist.all_reduce` of the same input.

    data, res = collectives.run()        # one launch of `everything` on 4 ranks: plain data, and the RunResult
    data["primitives"][0]["after"][2]    # what rank 2 held after the broadcast: [[[0, 0]]] (one chunk, from a)
"""
from __future__ import annotations

import dataclasses

from sandbox.launcher import launch
from sandbox.result import RunResult

WORLD = 4
CHUNKS = 4  # chunks per rank where a primitive splits a tensor (scatter, reduce_scatter, all_to_all, the ring)
RING_FUNCS = ("ring_all_reduce", "reference_all_reduce")  # the functions whose calls make the ring's timeline

# name, the call as the page writes it, one line on what it does; in the order of the Concepts page
PRIMITIVES = [
    ("broadcast", "dist.broadcast(t, src=0)", "the root's tensor is copied into every rank's t"),
    ("reduce", "dist.reduce(t, dst=0)", "the sum lands on the root only; the others' t is left unspecified"),
    ("all_reduce", "dist.all_reduce(t)", "every rank ends with the sum of every rank's t"),
    ("gather", "dist.gather(t, gather_list, dst=0)", "the root receives every rank's t, in rank order"),
    ("all_gather", "dist.all_gather(out_list, t)", "every rank receives every rank's t, in rank order"),
    ("reduce_scatter", "dist.reduce_scatter(out, in_list)", "rank i receives the sum of everyone's chunk i"),
    ("scatter", "dist.scatter(out, scatter_list, src=0)", "the root hands chunk i of its list to rank i"),
    ("all_to_all", "dist.all_to_all_single(out, t)",
     "rank i sends its chunk j to rank j and receives everyone's chunk i"),
    ("barrier", "dist.barrier()", "no data moves; no rank leaves until every rank has arrived"),
    ("send_recv", "dist.send(t, dst=1) / dist.recv(t, src=0)",
     "rank 0's tensor is copied into rank 1's; ranks 2 and 3 take no part"),
]
# where the contract leaves a rank's result unspecified: drawn as what gloo left there, marked as such
UNSPECIFIED = {"reduce": [1, 2, 3]}
# what a rank's row is called beside "rank R", and a note after its row
ROLES = {"broadcast": {0: "src"}, "reduce": {0: "dst"}, "gather": {0: "dst"}, "scatter": {0: "src"},
         "send_recv": {0: "send to 1", 1: "recv from 0"}}
NOTES = {"reduce": {r: "unspecified: what gloo left" for r in (1, 2, 3)},
         "send_recv": {2: "takes no part", 3: "takes no part"}}


def origin_value(rank: int, chunk: int) -> int:
    """The element chunk `chunk` of rank `rank` starts with: a power of two of its own."""
    return 1 << (CHUNKS * rank + chunk)


def origins(value: int) -> list[list[int]]:
    """The (rank, chunk) pairs summed into an element, as [rank, chunk] lists (JSON-friendly); [] for zero (an
    empty receive buffer)."""
    if value < 0 or value >= 1 << (CHUNKS * WORLD):
        raise ValueError(f"{value} is not a sum of distinct origin values")
    return [[b // CHUNKS, b % CHUNKS] for b in range(CHUNKS * WORLD) if value >> b & 1]


# ----------------------------------------------------------------------------------------------- inside a rank

def _own(rank: int, n: int):
    import torch

    return torch.tensor([origin_value(rank, c) for c in range(n)], dtype=torch.int64)


def _zeros(n: int):
    import torch

    return torch.zeros(n, dtype=torch.int64)


def _flat(tensors) -> list[int]:
    return [int(x) for t in tensors for x in t.reshape(-1).tolist()]


def primitives(rank: int) -> dict:
    """Each primitive once, in the page's order: {name: {"before": [ints], "after": [ints]}} for this rank, the ints
    being the elements it shows (its tensor, or its list of tensors), one per chunk."""
    import torch.distributed as dist

    out = {}
    t = _own(rank, 1)
    out["broadcast"] = {"before": _flat([t])}
    dist.broadcast(t, src=0)
    out["broadcast"]["after"] = _flat([t])

    t = _own(rank, 1)
    out["reduce"] = {"before": _flat([t])}
    dist.reduce(t, dst=0)
    out["reduce"]["after"] = _flat([t])

    t = _own(rank, 1)
    out["all_reduce"] = {"before": _flat([t])}
    dist.all_reduce(t)
    out["all_reduce"]["after"] = _flat([t])

    t = _own(rank, 1)
    gather_list = [_zeros(1) for _ in range(WORLD)] if rank == 0 else None
    out["gather"] = {"before": _flat([t])}
    dist.gather(t, gather_list, dst=0)
    out["gather"]["after"] = _flat(gather_list if rank == 0 else [t])  # the root shows its list, the others their t

    t, got = _own(rank, 1), [_zeros(1) for _ in range(WORLD)]
    out["all_gather"] = {"before": _flat([t])}
    dist.all_gather(got, t)
    out["all_gather"]["after"] = _flat(got)

    in_list, o = list(_own(rank, CHUNKS).split(1)), _zeros(1)
    out["reduce_scatter"] = {"before": _flat(in_list)}
    dist.reduce_scatter(o, in_list)
    out["reduce_scatter"]["after"] = _flat([o])

    scatter_list, o = (list(_own(rank, CHUNKS).split(1)) if rank == 0 else None), _zeros(1)
    out["scatter"] = {"before": _flat(scatter_list) if rank == 0 else _flat([o])}  # the others: an empty buffer
    dist.scatter(o, scatter_list, src=0)
    out["scatter"]["after"] = _flat([o])

    t, o = _own(rank, CHUNKS), _zeros(CHUNKS)  # the tensor form: gloo refuses the list form on torch 2.11
    out["all_to_all"] = {"before": _flat([t])}
    dist.all_to_all_single(o, t)
    out["all_to_all"]["after"] = _flat([o])

    t = _own(rank, 1)
    out["barrier"] = {"before": _flat([t])}
    dist.barrier()
    out["barrier"]["after"] = _flat([t])

    t = _own(rank, 1)
    out["send_recv"] = {"before": _flat([t])}
    if rank == 0:
        dist.send(t, dst=1)
    elif rank == 1:
        dist.recv(t, src=0)
    out["send_recv"]["after"] = _flat([t])
    return out


def ring_all_reduce(rank: int, world: int) -> dict:
    """A ring all-reduce of this rank's CHUNKS chunks, made of isend/irecv, recording every step. Step s of the
    reduce-scatter phase: send chunk (rank - s) to the next rank, receive chunk (rank - s - 1) from the previous one
    and add it to ours; after N-1 steps this rank holds the whole sum of chunk (rank + 1). Step s of the all-gather
    phase: send chunk (rank + 1 - s), receive chunk (rank - s) and keep it. Both sides of a step are posted before
    either is waited on: a gloo send waits for its recv, so N ranks that all `send` first would deadlock."""
    import torch.distributed as dist

    t = _own(rank, CHUNKS)
    start = _flat([t])
    chunks = list(t.split(1))  # views: writing a chunk writes t
    nxt, prev = (rank + 1) % world, (rank - 1) % world
    steps = []
    for phase, first in (("reduce-scatter", 0), ("all-gather", 1)):
        for s in range(world - 1):
            send, recv = (rank + first - s) % world, (rank + first - s - 1) % world
            buf = _zeros(1)
            works = [dist.isend(chunks[send].clone(), dst=nxt), dist.irecv(buf, src=prev)]
            for w in works:
                w.wait()
            if phase == "reduce-scatter":
                chunks[recv] += buf
            else:
                chunks[recv].copy_(buf)
            steps.append({"phase": phase, "step": s + 1, "send": send, "to": nxt, "recv": recv, "from": prev,
                          "holds": _flat([t])})
    return {"start": start, "steps": steps, "result": _flat([t])}


def reference_all_reduce(rank: int) -> list[int]:
    """The same input through `dist.all_reduce`: what the ring must end with."""
    import torch.distributed as dist

    t = _own(rank, CHUNKS)
    dist.all_reduce(t)
    return _flat([t])


def everything() -> dict:
    """What one rank runs: every primitive, then the ring and the all_reduce it must equal."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    prims = primitives(rank)
    ring = ring_all_reduce(rank, world)
    ring["all_reduce"] = reference_all_reduce(rank)
    return {"primitives": prims, "ring": ring}


# ----------------------------------------------------------------------------------------------- in the parent

def _mixes(values: list[int]) -> list[list[list[int]]]:
    return [origins(v) for v in values]


def assemble(values: list[dict]) -> dict:
    """The ranks' return values (rank order) as one plain record: every element decoded into its origins.

        {"world_size": 4,
         "primitives": [{"name", "call", "caption", "unspecified": [ranks], "roles": [per rank], "notes": [...],
                         "before": [per rank: [per chunk: [[rank, chunk], ...]]], "after": [...]}, ...],
         "ring": {"start": [per rank: chunks], "result": [...], "all_reduce": [...],
                  "steps": [{"phase", "step", "ranks": [per rank: {"send", "to", "recv", "from", "holds"}]}]}}
    """
    prims = []
    for name, call, caption in PRIMITIVES:
        prims.append({"name": name, "call": call, "caption": caption, "unspecified": UNSPECIFIED.get(name, []),
                      "roles": [ROLES.get(name, {}).get(r, "") for r in range(len(values))],
                      "notes": [NOTES.get(name, {}).get(r, "") for r in range(len(values))],
                      "before": [_mixes(v["primitives"][name]["before"]) for v in values],
                      "after": [_mixes(v["primitives"][name]["after"]) for v in values]})
    rings = [v["ring"] for v in values]
    steps = []
    for i, first in enumerate(rings[0]["steps"]):
        steps.append({"phase": first["phase"], "step": first["step"],
                      "ranks": [{**{k: r["steps"][i][k] for k in ("send", "to", "recv", "from")},
                                 "holds": _mixes(r["steps"][i]["holds"])} for r in rings]})
    ring = {"start": [_mixes(r["start"]) for r in rings], "steps": steps,
            "result": [_mixes(r["result"]) for r in rings], "all_reduce": [_mixes(r["all_reduce"]) for r in rings]}
    return {"world_size": len(values), "primitives": prims, "ring": ring}


def run(**launch_options) -> tuple[dict, RunResult]:
    """`everything` on WORLD gloo ranks in one launch: the assembled record, and the run itself (for its timeline).
    Raises RuntimeError, with the verdict and its summary, when the run did not finish on every rank."""
    res = launch(everything, world_size=WORLD, init=True, **launch_options)
    if not res.ok:
        raise RuntimeError(f"the collectives run ended {res.verdict}: {res.diagnosis.summary}")
    return assemble(res.values), res


def ring_calls(res: RunResult) -> RunResult:
    """The run with only the calls of the ring and of its reference all_reduce: the events the ring's timeline
    draws. The run's end is dropped, so the axis ends with the last of these calls."""
    calls = {(e["rank"], e["id"]) for e in res.events if e.get("ev") == "enter" and e.get("func") in RING_FUNCS}
    keep = [e for e in res.events if e.get("ev") in ("enter", "exit", "done") and (e["rank"], e.get("id")) in calls]
    return dataclasses.replace(res, events=keep, ended_at=None)  # an exit names its call by id only
