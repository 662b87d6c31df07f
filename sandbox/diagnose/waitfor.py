"""The wait-for graph of a stuck run, over every process group and every point-to-point call, as MUST builds one for
MPI (Hilbrich et al., "MPI Runtime Error Detection with MUST", 2012): each blocked rank waits for the ranks whose
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

from sandbox.calls import is_collective, op_of, p2p_direction
from sandbox.diagnose.progress import _at_new_group, _offers, _pairs, new_group_members
from sandbox.events import RankTrack

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
              if m != t.rank and not (m in live and _at_new_group(live[m], call))]
    elif is_collective(call) and call.get("group"):
        on = []
        for m in call["group"]:
            q = tracks.get(m)
            if m == t.rank or (q is not None and _pairs(call, q.pending)):
                continue
            bucket = (call.get("gname"), call.get("seq"))
            if q is not None and m in live and q.passed.get(bucket) and _pairs(call, q.by_bucket.get(bucket)):
                continue  # it did its part already (a broadcast's root leaves early)
            on.append(m)
    elif p2p_direction(call):
        want = "recv" if p2p_direction(call) == "send" else "send"
        peers = [call["peer"]] if call.get("peer") is not None else [r for r in tracks if r != t.rank]
        if any(r in live and _offers(live[r], want, t.rank, call.get("tag", 0)) for r in peers):
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


def cycle(tracks: dict[int, RankTrack], waits: dict[int, Wait]) -> list[int] | None:
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
