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
    return bool(q.inits) and (q.pending is None or q.pending["op"] != "init_process_group")


def left_while_connecting(tracks: dict[int, RankTrack], outcomes: dict[int, str] | None = None) -> Diagnosis | None:
    """A rank still inside (or failed in, its peer gone) init_process_group or new_group, whose peers of that call
    include ranks that got through it and then finished without an error, and none that crashed or raised a cause
    of its own: those ranks left while it was still connecting to them."""
    outcomes = outcomes or {}
    for r, t in sorted(tracks.items()):
        p = _connecting_call(t)
        if p is None:
            continue
        peers = [m for m in _peers(p, tracks) if m != r and m in tracks]
        left = [m for m in peers if tracks[m].finished and tracks[m].error is None
                and outcomes.get(m, "ok") == "ok" and _got_through(tracks[m], p)]
        causes = [m for m in tracks if m != r and (outcomes.get(m) == "crashed" or (
            tracks[m].error is not None and not words.peer_lost(tracks[m].error.get("message"))))]
        if not left or causes:
            continue
        slow = [m for m, q in sorted(tracks.items()) if _connecting_call(q) is not None
                and _connecting_call(q).get("op") == p["op"]]
        failed = words.peer_lost(t.failed_with) and t.pending is None
        how = (f"failed in {words.call(p)} at {p.get('site')} (\"{words.PEER_LOST.search(t.failed_with).group(0)}\")"
               if failed
               else f"waits in {words.call(p)} at {p.get('site')}")
        barrier = (", or set TORCH_DIST_INIT_BARRIER=1 so that init_process_group itself waits for every rank"
                   if p["op"] == "init_process_group" else "")
        return Diagnosis(
            kind=Kind.LEFT_EARLY,
            cause=f"{words.ranks(slow).capitalize()} {how}: it was still making its connections when"
                  f" {words.ranks(left)}, whose {p['op']} had returned, finished and closed theirs."
                  f" {p['op']} returns on each rank once that rank's own connections are made, not once every"
                  f" rank's are, and nothing after it made {words.ranks(left)} wait for {words.ranks(slow)}."
                  f" Make a call every rank takes part in (dist.barrier()) before destroy_process_group{barrier}.",
            culprit_ranks=left, op=p["op"], group=sorted(set(peers) | {r}), site=p.get("site"),
            details={"connecting": slow, "left": left})
    return None
