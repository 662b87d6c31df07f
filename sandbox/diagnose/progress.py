"""The hang rule: could any rank still move? A run is deadlocked when every rank that is still alive is blocked in
a distributed call that its peers cannot complete (they are elsewhere, gone, or waiting in a call that cannot pair
with it). `progress_possible` is that rule; `provable_deadlock` says when it is certain the moment the last rank
blocks, with no grace period. Whether two ranks' collectives can pair is `sandbox.calls.matches` at PAIR level.

The wait-for graph of a stuck run (`graph`, `deadlocked`, `find_cycle`), over every process group and every
point-to-point call, as MUST builds one for MPI (Hilbrich et al., "MPI Runtime Error Detection with MUST", 2012):
each blocked rank waits for the ranks whose
part its call still needs. A collective (or new_group) waits for every member that is not inside the same call:
AND, all of them must come. A send or recv with a peer waits for that peer; a recv from any source waits for any
other rank: OR, one is enough. Ranks that are running their own code may still come; finished ranks never will.

A rank is deadlocked when nothing it waits for can ever come: for AND, one such rank is enough; for OR, all of them
must be. Among the deadlocked ranks, a cycle of waits names the deadlock as one ("rank 3 waits in group [2, 3]'s
all_gather for rank 2, which waits in the world's all_reduce for rank 3"), whichever groups and kinds of call it
crosses; ranks outside the cycle that wait on it are said to wait behind it.
"""
from __future__ import annotations

from dataclasses import dataclass

from sandbox import calls
from sandbox.calls import is_collective, op_of, p2p_direction
from sandbox.diagnose import hosts
from sandbox.events import RankTrack


def offers(q: RankTrack, direction: str, to: int, tag: int = 0) -> bool:
    """Does rank q have a send (or recv) towards rank `to`, with this tag, in flight, blocking or posted?"""
    cands = list(q.posted.values())
    if q.pending is not None:
        cands.append(q.pending)
    return any(p2p_direction(p) == direction and p.get("peer") in (to, None) and p.get("tag", 0) == tag
               for p in cands)


def new_group_members(p: dict, tracks: dict[int, RankTrack]) -> list[int]:
    """Who must be inside the same new_group call for it to return: every rank of the world (torch's store-based
    barrier over the default group), or only the listed ranks when made with use_local_synchronization."""
    if p.get("local_sync") and isinstance(p.get("ranks"), list):
        return p["ranks"]
    ws = max([len(tracks)] + [t.hello.get("world_size", 0) for t in tracks.values() if t.hello])
    return list(range(ws))


def at_new_group(q: RankTrack, p: dict) -> bool:
    """Is rank q inside the same new_group call as `p`, or (alive) already through it?"""
    def same(g):
        return g.get("index") == p.get("index") and g.get("ranks") == p.get("ranks")
    if q.pending is not None and q.pending["op"] == "new_group" and same(q.pending):
        return True
    return any(same(g) and g["id"] not in q.open for g in q.new_groups)


def pairs(p: dict, q: dict | None) -> bool:
    """Is q, another rank's call, the same collective call as p (same slot, and able to pair with it)?"""
    return (q is not None and is_collective(q) and calls.slot(q) == calls.slot(p)
            and calls.matches(p, q, calls.PAIR))


def can_complete(p: dict, me: RankTrack, tracks: dict[int, RankTrack]) -> bool:
    """Could the pending call `p` of rank `me` finish given what every other rank is doing now?"""
    live = {r: t for r, t in tracks.items() if not t.finished}
    if p["op"] == "init_process_group":
        # on several hosts a loopback endpoint is each host's own: "localhost:29500" on node0 and on node1 never meet
        spread = hosts.several(tracks)
        here = hosts.meeting_point(me, p, spread)
        return all(r in live and live[r].pending is not None and live[r].pending["op"] == "init_process_group"
                   and hosts.meeting_point(live[r], live[r].pending, spread) == here
                   and live[r].pending.get("world_size") == p.get("world_size") for r in p.get("group") or [])
    if p["op"] == "new_group":
        return all(r in live and at_new_group(live[r], p) for r in new_group_members(p, tracks))
    if is_collective(p):
        for r in p.get("group") or ():
            q = tracks.get(r)
            if q is None:
                return False
            if pairs(p, q.pending):
                continue
            # a live peer that already got through this very call did its part (a broadcast's root leaves early);
            # once it has exited, the ranks still inside can only be hung, whatever it passed
            bucket = calls.slot(p)
            if r in live and q.passed.get(bucket) and pairs(p, q.by_bucket.get(bucket)):
                continue
            return False
        return True
    direction = p2p_direction(p)
    if direction is not None:
        want = "recv" if direction == "send" else "send"
        peers = [p["peer"]] if p.get("peer") is not None else [r for r in live if r != me.rank]
        return any(r in live and offers(live[r], want, me.rank, p.get("tag", 0)) for r in peers)
    if p["op"] == "destroy_process_group":
        # gloo's returns at once; NCCL's waits on the communicators' peers, so it is stuck only behind a peer that
        # is stuck in a call of its own
        return all(q.pending is None or q.pending["op"] == "destroy_process_group" or can_complete(q.pending, q, tracks)
                   for r, q in live.items() if r != me.rank)
    return True  # batch_isend_irecv (posting only), anything unknown: not judged


def progress_possible(tracks: dict[int, RankTrack]) -> bool:
    """False when every live rank is blocked in a call its peers cannot complete: a deadlock."""
    live = [t for t in tracks.values() if not t.finished]
    if not live:
        return True
    return any(t.pending is None or can_complete(t.pending, t, tracks) for t in live)


def provable_deadlock(tracks: dict[int, RankTrack]) -> bool:
    """Is the deadlock certain from the traces alone, with no grace period needed? True when (a) every member of a
    group has entered the same call #k of it and the calls cannot pair, (b) blocking point-to-point calls form
    a cycle with nothing posted that could match them, or (c) the wait-for graph (below) has a cycle across groups
    through calls none of which can return before the ranks they wait for arrive. Within one group, where the
    ranks stand in its sequence says more (and a Flight Recorder dump may show a call its rank has left), so (c)
    leaves those to (a) and the grace period. Call only when `progress_possible` is False."""
    live = {r: t for r, t in tracks.items() if not t.finished}
    pend = {r: t.pending for r, t in live.items() if t.pending is not None}
    if len(pend) < len(live) or any(t.inflight for t in live.values()):
        return False  # a rank busy in its own code, or a GPU call still running, may yet move
    buckets: dict = {}
    for r, p in pend.items():
        if is_collective(p) and p.get("group") and p.get("seq") is not None:
            buckets.setdefault(calls.slot(p), {})[r] = p
    for members in buckets.values():
        group = next(iter(members.values()))["group"]
        if set(members) == set(group) and calls.disagreements(members, calls.PAIR):
            return True
    cycle = p2p_cycle(pend)
    if cycle is not None and not any(live[r].posted for r in cycle):
        return True
    waits = graph(tracks, pend)
    ring = find_cycle(tracks, waits)  # (c) a cycle of waits across groups through calls that cannot return unmatched
    return (ring is not None and across_groups(waits, ring) and certain(waits, ring)
            and not any(live[r].posted or waits[r].call.get("lens") == "flight" for r in ring))


def p2p_cycle(pend: dict[int, dict]) -> list[int] | None:
    """Ranks that block in point-to-point calls on each other in a cycle (rank a waits on b, b on ... a)."""
    waits = {r: p for r, p in pend.items() if p2p_direction(p) and p.get("peer") is not None}
    for start in sorted(waits):
        path, r = [], start
        while r in waits and r not in path:
            path.append(r)
            r = waits[r]["peer"]
        if r in path:
            return path[path.index(r):]
    return None


# collectives whose every member must be inside the call before any of them returns, whatever the backend buffers:
# a rank blocked in one of these is certainly blocked while a member is elsewhere
EXCHANGES = {"all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "barrier", "all_to_all",
             "all_to_all_single", "reduce_scatter", "reduce_scatter_tensor", "monitored_barrier", "new_group"}
# rooted collectives, and the side that cannot return before its peers arrive: a broadcast's or a scatter's
# receivers need the root's data, a reduce's or a gather's root needs every member's; the other side (a broadcast's
# root, a gather's sender) may return as soon as its data is handed over, so it is not counted on
WAITS_FOR_ROOT = {"broadcast", "broadcast_object_list", "scatter", "scatter_object_list"}
ROOT_WAITS = {"reduce", "gather", "gather_object"}


@dataclass(frozen=True)
class Wait:
    """What one blocked rank waits for: `call` (the pending call, or for a wait() the asynchronous call it waits
    on), `on` (the ranks), `any` (OR: one of them is enough; else all of them must come)."""
    rank: int
    call: dict
    on: tuple[int, ...]
    any: bool = False


def _underlying(t: RankTrack, p: dict) -> dict:
    """The call a pending wait() waits on (an isend, an irecv, an async collective), else the call itself."""
    if p.get("op") != "wait":
        return p
    return next((ev for ev in t.events if ev.get("ev") == "enter" and ev.get("id") == p.get("of_id")), p)


def wait_of(t: RankTrack, p: dict, tracks: dict[int, RankTrack]) -> Wait | None:
    """Whom rank t, blocked in `p`, waits for; None where the call is not one the graph judges (init, anything
    unknown) or needs nobody else now (its peers are all inside it, or offer the matching send or recv)."""
    call = _underlying(t, p)
    live = {r: q for r, q in tracks.items() if not q.finished}
    if call.get("op") == "new_group":
        on = [m for m in new_group_members(call, tracks)
              if m != t.rank and not (m in live and at_new_group(live[m], call))]
    elif is_collective(call) and call.get("group"):
        on = []
        for m in call["group"]:
            q = tracks.get(m)
            if m == t.rank or (q is not None and pairs(call, q.pending)):
                continue
            bucket = calls.slot(call)
            if q is not None and m in live and q.passed.get(bucket) and pairs(call, q.by_bucket.get(bucket)):
                continue  # it did its part already (a broadcast's root leaves early)
            on.append(m)
    elif p2p_direction(call):
        want = "recv" if p2p_direction(call) == "send" else "send"
        peers = [call["peer"]] if call.get("peer") is not None else [r for r in tracks if r != t.rank]
        if any(r in live and offers(live[r], want, t.rank, call.get("tag", 0)) for r in peers):
            return None
        return Wait(t.rank, call, tuple(peers), any=call.get("peer") is None) if peers else None
    else:
        return None
    return Wait(t.rank, call, tuple(on)) if on else None


def graph(tracks: dict[int, RankTrack], pend: dict[int, dict]) -> dict[int, Wait]:
    """Every blocked rank's wait (those the graph judges)."""
    waits = {}
    for r, p in pend.items():
        if r in tracks:
            w = wait_of(tracks[r], p, tracks)
            if w is not None:
                waits[r] = w
    return waits


def deadlocked(tracks: dict[int, RankTrack], waits: dict[int, Wait]) -> set[int]:
    """The ranks that can never move: the complement of the ranks that might (running their own code, or waiting
    only for ranks that might: AND all of them, OR one), found as a fixpoint."""
    might = {r for r, t in tracks.items() if not t.finished and r not in waits}
    changed = True
    while changed:
        changed = False
        for r, w in waits.items():
            if r in might:
                continue
            ok = any(m in might for m in w.on) if w.any else all(m in might for m in w.on)
            if ok:
                might.add(r)
                changed = True
    return set(waits) - might


def find_cycle(tracks: dict[int, RankTrack], waits: dict[int, Wait]) -> list[int] | None:
    """A cycle of waits among the deadlocked ranks (the one through the lowest rank that is on one), as the ranks in
    order: each waits for the next, the last for the first."""
    stuck = deadlocked(tracks, waits)
    for start in sorted(stuck):
        path, r = [], start
        while r in stuck and r not in path:
            path.append(r)
            r = next((m for m in sorted(waits[r].on) if m in stuck), None)
        if r is not None and r in path:
            return path[path.index(r):]
    return None


def behind(waits: dict[int, Wait], ring: list[int]) -> list[int]:
    """The blocked ranks outside the cycle that wait, directly or through others, on a rank of it."""
    held = set(ring)
    changed = True
    while changed:
        changed = False
        for r, w in waits.items():
            if r not in held and any(m in held for m in w.on):
                held.add(r)
                changed = True
    return sorted(held - set(ring))


def identity(w: Wait) -> tuple:
    """One call across ranks: a collective's group and number; a point-to-point call's pair and direction."""
    if is_collective(w.call) or w.call.get("op") == "new_group":
        return ("coll", w.call.get("gname"), w.call.get("seq"), op_of(w.call), w.call.get("index"))
    return ("p2p", w.rank, p2p_direction(w.call), w.call.get("peer"))


def certain(waits: dict[int, Wait], ring: list[int]) -> bool:
    """Is the cycle certain the moment its ranks block: every call in it one that cannot return before the ranks it
    waits for arrive (EXCHANGES, the waiting side of a rooted collective, a recv; a gloo send of a small message may
    return unmatched)."""
    for r in ring:
        c, op = waits[r].call, waits[r].call.get("op")
        receives = ((op in WAITS_FOR_ROOT and c.get("root") not in (None, r))
                    or (op in ROOT_WAITS and c.get("root") == r))
        if not (op in EXCHANGES or receives or p2p_direction(c) == "recv"):
            return False
    return True


def across_groups(waits: dict[int, Wait], ring: list[int]) -> bool:
    """Does the cycle cross process groups, through at least one collective (not only point-to-point calls)?"""
    return (len({waits[r].call.get("gname") for r in ring}) > 1
            and any(is_collective(waits[r].call) for r in ring))
