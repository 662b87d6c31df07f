"""Ranks that finished while a slower rank was still connecting to them.

gloo's `init_process_group` (and `new_group`, for the group's members) makes the rank's connections to its peers,
one pair at a time (gloo's connectFullMesh), and returns on each rank as soon as that rank's own pairs are made,
not once every rank's are: torch adds no barrier after it unless TORCH_DIST_INIT_BARRIER=1
(torch/distributed/distributed_c10d.py). So a program whose ranks make no call together after it (they only do
local work, or the group's broadcast root sends and leaves, or a rank outside a sub-group has nothing more to do)
lets the fast ranks destroy their groups and exit while a slower rank is still reading from their side of a pair:
that rank's call fails ("Connection closed by peer") or waits for a peer that is gone. It happens under plain
torchrun too, on a loaded machine. Named after the init and group mismatch rules (ranks that made other groups may
leave others connecting too); the group rule compares the ranks cut off only on the groups they made before, and
the missing-ranks rule excuses them where a rank skipped a later call (`victims`, for both).
"""
from __future__ import annotations

from sandbox import words
from sandbox.calls import is_collective
from sandbox.diagnose.progress import at_new_group, pairs
from sandbox.events import RankTrack
from sandbox.result import Diagnosis, Kind

CONNECTING = ("init_process_group", "new_group")  # the calls that make a group's connections


def _connecting_call(t: RankTrack) -> dict | None:
    """The connecting call rank t is inside, or that raised only because a peer went away and was the last call it
    entered (a failure it caught and got past is not where it was cut off). gloo's (NCCL makes its connections
    otherwise), and not a new_group made with use_local_synchronization (its numbering is each member's own)."""
    if t.pending is not None:
        p = t.pending
    elif t.failed_call is not None and words.peer_lost(t.failed_with):
        p = t.failed_call
        last = next((e for e in reversed(t.events) if e.get("ev") == "enter"), None)
        if last is None or last.get("id") != p.get("id"):
            return None
    else:
        return None
    if p["op"] not in CONNECTING or p.get("local_sync") or "nccl" in str(p.get("backend") or "").lower():
        return None
    return p


def _peers(p: dict, tracks: dict[int, RankTrack]) -> list[int]:
    """Whom the call connects its rank with: the world for init_process_group, a new group's members."""
    if p["op"] == "init_process_group":
        return list(p.get("group") or tracks)
    return list(p["ranks"]) if isinstance(p.get("ranks"), list) else list(tracks)


def _got_through(q: RankTrack, p: dict, k: int) -> bool:
    """Did rank q return without an error from the same connecting call, its k-th init_process_group (the same
    rendezvous: endpoint and world size) or the same new_group?"""
    if q.failed_call is not None and q.failed_call["op"] == p["op"] and not q.finished:
        return False
    if p["op"] == "new_group":
        return at_new_group(q, p) and (q.pending is None or q.pending["op"] != "new_group")
    if len(q.inits) < k:
        return False
    i = q.inits[k - 1]
    return ((i.get("endpoint"), i.get("world_size")) == (p.get("endpoint"), p.get("world_size"))
            and i["id"] not in q.open and (q.failed_call is None or q.failed_call.get("id") != i["id"]))


def victims(tracks: dict[int, RankTrack], outcomes: dict[int, str] | None = None) -> dict[int, list[int]]:
    """{rank: the ranks that left it}: each rank still inside (or failed in, its peer gone) init_process_group or
    new_group, of whose peers in that call some got through it and then finished without an error, while no rank
    crashed or raised a cause of its own."""
    outcomes = outcomes or {}
    if any(outcomes.get(m) == "crashed" or (t.error is not None and not words.peer_lost(t.error.get("message")))
           for m, t in tracks.items()):
        return {}
    out = {}
    for r, t in sorted(tracks.items()):
        p = _connecting_call(t)
        if p is None or r not in _peers(p, tracks):
            continue
        k = sum(1 for i in t.inits if i["t"] <= p["t"])  # which init of the rank's this is
        left = [m for m in _peers(p, tracks) if m != r and m in tracks and tracks[m].finished
                and tracks[m].error is None and outcomes.get(m, "ok") == "ok" and _got_through(tracks[m], p, k)]
        if left:
            out[r] = left
    return out


def _a_consequence(t: RankTrack, leavers: list[int], tracks: dict[int, RankTrack]) -> bool:
    """Is every leaver through the call rank t is in or failed in (a consequence of their leaving), rather than
    absent from it (a rank that skipped a collective is the missing-ranks rule's)?"""
    c = t.pending or t.failed_call
    if c is None:
        return True
    if not is_collective(c) or c.get("seq") is None:
        return False
    members = c.get("group") or list(tracks)
    slot = (c.get("gname"), c["seq"])
    return all(tracks[m].passed.get(slot) for m in leavers if m in members and m in tracks)


def _waits_for_them(t: RankTrack, slow: dict[int, list[int]], tracks: dict[int, RankTrack]) -> bool:
    """Does rank t, alive and through its own connecting, wait (or did it wait, until its launcher ended it) in a
    later call of a group that only ranks cut off are missing from: a new_group or collective that every other
    member is in or through? It waits for them as a consequence (a driver outside the workers' group left while a
    worker was still connecting in init, and the other workers wait in the group's new_group for that worker)."""
    c = t.pending
    if c is None or t.finished:
        return False
    if c["op"] == "new_group":
        members = list(c["ranks"]) if isinstance(c.get("ranks"), list) else list(tracks)

        def there(q: RankTrack) -> bool:
            return at_new_group(q, c)
    elif is_collective(c) and c.get("seq") is not None:
        members, slot = c.get("group") or list(tracks), (c.get("gname"), c["seq"])

        def there(q: RankTrack) -> bool:
            return bool(q.passed.get(slot)) or pairs(c, q.pending)
    else:
        return False
    absent = [m for m in members if m != t.rank and m in tracks and not there(tracks[m])]
    return bool(absent) and all(m in slow for m in absent)


def left_while_connecting(tracks: dict[int, RankTrack], outcomes: dict[int, str] | None = None) -> Diagnosis | None:
    """Ranks that left while others were still connecting to them (`victims`), when every other rank has finished
    too, and any that failed did so in a call the leavers had made (a consequence of their leaving), or waits in a
    later call for none but the ranks cut off (`_waits_for_them`): a rank waiting in, or failed in, a later call
    that the leavers never made is the missing-ranks rule's (they left without it), with the ranks left connecting
    excused there."""
    slow = victims(tracks, outcomes)
    if not slow:
        return None
    left = sorted({m for ms in slow.values() for m in ms})
    others = [t for r, t in tracks.items() if r not in slow and r not in left]
    if any(not (t.finished and _a_consequence(t, left, tracks)) and not _waits_for_them(t, slow, tracks)
           for t in others):
        return None
    who = sorted(slow)
    calls = {_connecting_call(tracks[r])["op"] for r in who}
    op = calls.pop() if len(calls) == 1 else "init_process_group or new_group"
    first = _connecting_call(tracks[who[0]])
    failed = [r for r in who if tracks[r].pending is None]
    one, gone = len(who) == 1, len(left) == 1
    if len(failed) == len(who):
        msg = tracks[who[0]].failed_with
        how = f"failed in {op} at {first.get('site')} (\"{words.PEER_LOST.search(msg).group(0)}\")"
    elif not failed:
        how = f"{'waits' if one else 'wait'} in {op} at {first.get('site')}"
    else:
        how = f"failed or wait in {op} at {first.get('site')}"
    return Diagnosis(
        kind=Kind.LEFT_EARLY,
        cause=f"{words.ranks(who).capitalize()} {how}: {'it was' if one else 'they were'} still making"
              f" {'its' if one else 'their'} connections when {words.ranks(left)}, whose {op} had returned,"
              f" finished and closed {'its side' if gone else 'theirs'}. {op} returns on each rank once that rank's own"
              f" connections are made, not once every rank's are, and nothing after it made {words.ranks(left)}"
              f" wait for {words.ranks(who)}. Make a call every rank takes part in (dist.barrier()) before"
              f" {'it' if gone else 'they'} finish{'es' if gone else ''}, or set TORCH_DIST_INIT_BARRIER=1, with which"
              f" torch waits for every rank at the end of init_process_group and new_group.",
        culprit_ranks=left, op=first["op"], group=sorted(set(_peers(first, tracks)) | set(who)), site=first.get("site"),
        details={"connecting": who, "left": left})
