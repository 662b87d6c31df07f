"""The hang rule: could any rank still move? A run is deadlocked when every rank that is still alive is blocked in
a distributed call that its peers cannot complete (they are elsewhere, gone, or waiting in a call that cannot pair
with it). `progress_possible` is that rule; `provable_deadlock` says when it is certain the moment the last rank
blocks, with no grace period. Whether two ranks' collectives can pair is `sandbox.calls.matches` at PAIR level.
"""
from __future__ import annotations

from sandbox import calls
from sandbox.calls import is_collective, p2p_direction
from sandbox.diagnose import hosts
from sandbox.events import RankTrack


def _offers(q: RankTrack, direction: str, to: int, tag: int = 0) -> bool:
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


def _at_new_group(q: RankTrack, p: dict) -> bool:
    """Is rank q inside the same new_group call as `p`, or (alive) already through it?"""
    def same(g):
        return g.get("index") == p.get("index") and g.get("ranks") == p.get("ranks")
    if q.pending is not None and q.pending["op"] == "new_group" and same(q.pending):
        return True
    return any(same(g) and g["id"] not in q.open for g in q.new_groups)


def _pairs(p: dict, q: dict | None) -> bool:
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
        return all(r in live and _at_new_group(live[r], p) for r in new_group_members(p, tracks))
    if is_collective(p):
        for r in p.get("group") or ():
            q = tracks.get(r)
            if q is None:
                return False
            if _pairs(p, q.pending):
                continue
            # a live peer that already got through this very call did its part (a broadcast's root leaves early);
            # once it has exited, the ranks still inside can only be hung, whatever it passed
            bucket = calls.slot(p)
            if r in live and q.passed.get(bucket) and _pairs(p, q.by_bucket.get(bucket)):
                continue
            return False
        return True
    direction = p2p_direction(p)
    if direction is not None:
        want = "recv" if direction == "send" else "send"
        peers = [p["peer"]] if p.get("peer") is not None else [r for r in live if r != me.rank]
        return any(r in live and _offers(live[r], want, me.rank, p.get("tag", 0)) for r in peers)
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
    a cycle with nothing posted that could match them, or (c) the wait-for graph (diagnose/waitfor.py) has a cycle
    through calls none of which can return before the ranks it waits for arrive. Call only when `progress_possible` is False."""
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
    from sandbox.diagnose import waitfor  # it builds on this module's rules

    waits = waitfor.graph(tracks, pend)
    ring = waitfor.cycle(tracks, waits)  # (c) a cycle of waits across calls that cannot return unmatched
    return ring is not None and waitfor.certain(waits, ring) and not any(live[r].posted for r in ring)


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
