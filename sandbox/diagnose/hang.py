"""Naming the cause of a hang, a timeout or an interrupted run: every rank is blocked (or the clock ran out), and
the rules say why, first match wins: a rendezvous mismatch, a group mismatch, a collective mismatch, a cycle of
point-to-point calls, or ranks that never arrive.
"""
from __future__ import annotations

from sandbox import words
from sandbox.calls import is_collective, op_of, p2p_direction
from sandbox.diagnose import framework
from sandbox.diagnose.mismatch import bucket_mismatch, group_mismatch, init_mismatch
from sandbox.diagnose.progress import new_group_members, p2p_cycle, progress_possible
from sandbox.events import RankTrack
from sandbox.result import Diagnosis

# what to do about a cycle of blocking point-to-point calls, right for any number of ranks: ordering the calls
# by rank parity ("even ranks send first") deadlocks again in a ring of an odd number of ranks, where two
# neighbours are both even (ranks 0 and 2 of 3), so it is not offered
P2P_ADVICE = (" Post both sides before waiting on either: isend and irecv (or one batch_isend_irecv with both), then"
              " wait on every request; that holds for any number of ranks.")


def p2p(tracks, pend) -> Diagnosis | None:
    waits = {r: p for r, p in pend.items() if p2p_direction(p) and p.get("peer") is not None}
    cycle = p2p_cycle(pend)
    if cycle is not None:
        kinds = {p2p_direction(waits[c]) for c in cycle}
        tags = {waits[c].get("tag", 0) for c in cycle}
        steps = "; ".join(f"rank {c} blocks in {words.call(waits[c])}"
                          f"{' (tag ' + str(waits[c].get('tag', 0)) + ')' if len(tags) > 1 else ''}"
                          f" at {waits[c].get('site')}" for c in cycle)
        advice = P2P_ADVICE
        if kinds == {"send", "recv"} and len(tags) > 1:
            why = "the send and the recv name different tags, so they never match"
            advice = " Use the same tag on both sides."
        elif kinds == {"send"}:
            why = "a gloo send does not complete until the peer posts the matching recv, so each waits for the other"
        else:
            why = "each waits for a message the other will only send after its own call returns"
        return Diagnosis(kind="p2p_cycle", cause=f"Point-to-point cycle: {steps}. {why[0].upper() + why[1:]}.{advice}",
                         culprit_ranks=sorted(cycle), op=op_of(waits[cycle[0]]), site=waits[cycle[0]].get("site"),
                         details={"cycle": cycle})
    for r, p in sorted(waits.items()):
        q = tracks.get(p["peer"])
        if q is not None:
            return Diagnosis(kind="missing_ranks",
                             cause=f"Rank {r} waits in {words.call(p)} at {p.get('site')}, but rank {q.rank} is"
                             f" {words.where(q)}.", culprit_ranks=[q.rank], op=op_of(p), site=p.get("site"),
                             details={"waiting": [r], "elsewhere": {str(q.rank): words.where(q)}})
    return None


def _members(p: dict, tracks) -> list[int] | None:
    if is_collective(p) or p["op"] == "init_process_group":
        return p.get("group")
    if p["op"] == "new_group":
        return new_group_members(p, tracks)
    return None


def missing(tracks, pend) -> Diagnosis | None:
    """The call that the most ranks wait in while others of its group never arrive (the earliest on a tie): when
    ranks 0 and 2 wait for rank 1 in an all_reduce and rank 1 waits for rank 0 in a sub-group's barrier, rank 1 is
    named, whichever of those calls was entered first."""
    found = []
    for r, p in sorted(pend.items(), key=lambda kv: kv[1]["t"]):
        members = _members(p, tracks)
        if not members:
            continue
        op = op_of(p)
        same = [m for m in members if m in pend and op_of(pend[m]) == op and pend[m].get("seq") == p.get("seq")
                and pend[m].get("gname") == p.get("gname")]
        absent = [m for m in members if m not in same]
        if absent:
            found.append((p, op, members, same, absent))
    if found:
        p, op, members, same, absent = max(found, key=lambda f: len(f[3]))  # max() keeps the first of a tie
        elsewhere = {str(m): words.where(tracks[m]) if m in tracks else "never started" for m in absent}
        detail = "; ".join(f"rank {m} is {w}" for m, w in elsewhere.items())
        return Diagnosis(kind="missing_ranks",
                         cause=f"{words.ranks(same).capitalize()} {'waits' if len(same) == 1 else 'wait'} in {words.call(p)} at"
                         f" {p.get('site')}, but {words.ranks(absent)} never"
                         f" {'arrives' if len(absent) == 1 else 'arrive'}: {detail}.",
                         culprit_ranks=absent, op=op, group=members, seq=p.get("seq"), site=p.get("site"),
                         details={"waiting": same, "elsewhere": elsewhere})
    return None


def lost_peer(t: RankTrack) -> bool:
    """Did this rank's own code fail only because a peer went away (a consequence, not a cause)?"""
    return t.error is not None and words.peer_lost(t.error.get("message"))


def blocked_call(t: RankTrack) -> dict | None:
    """The call a rank was stuck in: the one it is inside, or, when that call raised only because a peer went away
    (its launcher ended the peer: torchrun tearing a hung job down), the call that raised."""
    if t.pending is not None:
        return t.pending
    return t.failed_call if lost_peer(t) else None


def diagnose_hang(tracks: dict[int, RankTrack]) -> Diagnosis:
    pend = {r: blocked_call(t) for r, t in tracks.items() if blocked_call(t) is not None}
    for finder in (lambda: init_mismatch(tracks), lambda: group_mismatch(tracks, strict=True),
                   lambda: framework.uneven_steps(tracks, pend),
                   lambda: framework.bucket_without_partner(tracks, pend), lambda: bucket_mismatch(tracks, pend),
                   lambda: p2p(tracks, pend), lambda: missing(tracks, pend)):
        d = finder()
        if d is not None:
            return d
    parts = "; ".join(f"rank {r} {words.where(t)}" for r, t in sorted(tracks.items()))
    return Diagnosis(kind="none", cause=f"Every rank is blocked and none can finish, but the pattern is not one the"
                     f" sandbox names: {parts}.")


def _waiting_and_busy(tracks):
    busy = [t for t in tracks.values() if not t.finished and t.pending is None]
    waiting = [t for t in tracks.values() if not t.finished and t.pending is not None]
    return busy, waiting


def diagnose_timeout(tracks: dict[int, RankTrack], timeout: float) -> Diagnosis:
    busy, waiting = _waiting_and_busy(tracks)
    if busy and waiting:
        w = waiting[0]
        return Diagnosis(kind="straggler",
                         cause=f"Not a deadlock: {words.ranks([t.rank for t in busy])}"
                         f" {'was' if len(busy) == 1 else 'were'} {words.where(busy[0])} when the {timeout:g} s"
                         f" timeout passed, while {words.ranks([t.rank for t in waiting])} waited in"
                         f" {words.call(w.pending)} at {w.pending.get('site')}.",
                         culprit_ranks=[t.rank for t in busy], op=w.pending["op"], group=w.pending.get("group"),
                         seq=w.pending.get("seq"), site=w.pending.get("site"),
                         details={"busy": {str(t.rank): words.where(t) for t in busy}})
    if waiting:
        return diagnose_hang(tracks).led_by(f"The {timeout:g} s timeout passed with every rank inside a distributed"
                                            " call:")
    return Diagnosis(kind="none", cause=f"The run did not finish within {timeout:g} s; no rank was waiting on another"
                     f" ({'; '.join(f'rank {t.rank} {words.where(t)}' for t in busy)}).")


def diagnose_interrupted(tracks: dict[int, RankTrack]) -> Diagnosis:
    """Where every rank was when the run was interrupted (Ctrl-C or SIGTERM)."""
    busy, waiting = _waiting_and_busy(tracks)
    if not busy and not waiting:
        return Diagnosis(kind="none", cause="Interrupted after every rank had finished.")
    parts = "; ".join(f"rank {t.rank} {words.where(t)}" for t in sorted(busy + waiting, key=lambda t: t.rank))
    d = Diagnosis(kind="none", cause=f"Interrupted before the run ended: {parts}.")
    if waiting and not busy and not progress_possible(tracks):
        hang = diagnose_hang(tracks)  # it was a deadlock already: say which, as the hang rule would have
        if hang.kind != "none":
            return hang.led_by("Interrupted while deadlocked.")
    return d
