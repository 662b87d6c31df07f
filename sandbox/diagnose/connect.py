"""Ranks that finished while a slower rank was still connecting to them.

gloo's `init_process_group` (and `new_group`, for the group's members) makes the rank's connections to its peers,
one pair at a time (gloo's connectFullMesh), and returns on each rank as soon as that rank's own pairs are made,
not once every rank's are: torch adds no barrier after it unless TORCH_DIST_INIT_BARRIER=1
(torch/distributed/distributed_c10d.py). So a program whose ranks make no call together after it (they only do
local work, or the group's broadcast root sends and leaves, or a rank outside a sub-group has nothing more to do)
lets the fast ranks destroy their groups and exit while a slower rank is still reading from their side of a pair:
that rank's call fails ("Connection closed by peer") or waits for a peer that is gone. It happens under plain
torchrun too, on a loaded machine. Named here before any rule that would read the slower rank's unfinished call as
a group or rendezvous that the others never made.
"""
from __future__ import annotations

from sandbox import words
from sandbox.diagnose.progress import at_new_group
from sandbox.events import RankTrack
from sandbox.result import Diagnosis, Kind

CONNECTING = ("init_process_group", "new_group")  # the calls that make a group's connections


def _connecting_call(t: RankTrack) -> dict | None:
    """The connecting call rank t is inside, or that raised only because a peer went away."""
    p = t.pending if t.pending is not None else (t.failed_call if words.peer_lost(t.failed_with) else None)
    return p if p is not None and p["op"] in CONNECTING else None


def _peers(p: dict, tracks: dict[int, RankTrack]) -> list[int]:
    """Whom the call connects its rank with: the world for init_process_group, a new group's members."""
    if p["op"] == "init_process_group":
        return list(p.get("group") or tracks)
    return list(p["ranks"]) if isinstance(p.get("ranks"), list) else list(tracks)


def _got_through(q: RankTrack, p: dict) -> bool:
    """Did rank q return from the same connecting call without an error?"""
    if q.failed_call is not None and q.failed_call["op"] == p["op"]:
        return False
    if p["op"] == "new_group":
        return at_new_group(q, p) and (q.pending is None or q.pending["op"] != "new_group")
    same = [i for i in q.inits if (i.get("endpoint"), i.get("world_size")) == (p.get("endpoint"), p.get("world_size"))]
    return bool(same) and (q.pending is None or q.pending["op"] != "init_process_group")  # the same rendezvous


def victims(tracks: dict[int, RankTrack], outcomes: dict[int, str] | None = None) -> dict[int, list[int]]:
    """{rank: the ranks that left it}: each rank still inside (or failed in, its peer gone) init_process_group or
    new_group whose peers of that call include ranks that got through it and then finished without an error, while
    no rank crashed or raised a cause of its own."""
    outcomes = outcomes or {}
    if any(outcomes.get(m) == "crashed" or (t.error is not None and not words.peer_lost(t.error.get("message")))
           for m, t in tracks.items()):
        return {}
    out = {}
    for r, t in sorted(tracks.items()):
        p = _connecting_call(t)
        if p is None:
            continue
        left = [m for m in _peers(p, tracks) if m != r and m in tracks and tracks[m].finished
                and tracks[m].error is None and outcomes.get(m, "ok") == "ok" and _got_through(tracks[m], p)]
        if left:
            out[r] = left
    return out


def left_while_connecting(tracks: dict[int, RankTrack], outcomes: dict[int, str] | None = None) -> Diagnosis | None:
    """Ranks that left while others were still connecting to them (`victims`), when every other rank has finished
    too: a rank still waiting in a later call that the leavers never made is the missing-ranks rule's (they left
    without it), with the ranks left connecting excused there."""
    slow = victims(tracks, outcomes)
    if not slow:
        return None
    left = sorted({m for ms in slow.values() for m in ms})
    if any(not t.finished and r not in slow for r, t in tracks.items()):
        return None
    r = min(slow)
    t = tracks[r]
    p = _connecting_call(t)
    failed = words.peer_lost(t.failed_with) and t.pending is None
    how = (f"failed in {words.call(p)} at {p.get('site')} (\"{words.PEER_LOST.search(t.failed_with).group(0)}\")"
           if failed else f"waits in {words.call(p)} at {p.get('site')}")
    barrier = (", or set TORCH_DIST_INIT_BARRIER=1 so that init_process_group itself waits for every rank"
               if p["op"] == "init_process_group" else "")
    who = sorted(slow)
    return Diagnosis(
        kind=Kind.LEFT_EARLY,
        cause=f"{words.ranks(who).capitalize()} {how}: {'it was' if len(who) == 1 else 'they were'} still making"
              f" {'its' if len(who) == 1 else 'their'} connections when {words.ranks(left)}, whose {p['op']} had"
              f" returned, finished and closed theirs. {p['op']} returns on each rank once that rank's own connections"
              f" are made, not once every rank's are, and nothing after it made {words.ranks(left)} wait for"
              f" {words.ranks(who)}. Make a call every rank takes part in (dist.barrier()) before"
              f" destroy_process_group{barrier}.",
        culprit_ranks=left, op=p["op"], group=sorted(set(_peers(p, tracks)) | {r}), site=p.get("site"),
        details={"connecting": who, "left": left})
