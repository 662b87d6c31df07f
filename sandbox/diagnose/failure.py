"""Naming the cause of a failure: a rank crashed or raised. The first real cause is named (a mismatch the calls
show, a group mismatch, the first rank to die, the first error that is not only "a peer went away"), with what its
peers saw.
"""
from __future__ import annotations

from dataclasses import replace

from sandbox import words
from sandbox.diagnose import framework, hosts
from sandbox.diagnose.connect import left_while_connecting, victims
from sandbox.diagnose.hang import busy_at_timeout, missing
from sandbox.diagnose.mismatch import bucket_mismatch, group_mismatch
from sandbox.diagnose.sharding import fsdp_uneven, fsdp_words
from sandbox.events import RankTrack
from sandbox.result import Diagnosis, Kind


def diagnose_failure(tracks: dict[int, RankTrack], outcomes: dict[int, str]) -> Diagnosis:
    """A rank crashed or raised: name the first real cause, and what its peers saw."""
    crashed = [t for r, t in tracks.items() if outcomes.get(r) == "crashed"]
    errored = [t for r, t in tracks.items() if outcomes.get(r) == "error"]
    # where each rank was: the call it is inside, or the distributed call that raised; a rank killed by a signal
    # outside any call was inside the asynchronous collective it had started and not yet waited on, if any (gloo's
    # thread ran it: a mismatch met there can abort the process before the rank reaches its wait)
    pend = {r: c for r, t in tracks.items()
            if (c := t.pending or t.failed_call or (t.unwaited_collective if outcomes.get(r) == "crashed" else None))
            is not None}
    for t in errored:  # TORCH_DISTRIBUTED_DEBUG=DETAIL names the mismatch itself
        e = t.error
        if e and "mismatch between collectives" in e.get("message", ""):
            d = bucket_mismatch(tracks, pend)
            if d is not None:
                return replace(d, details={**d.details, "torch_says": e["message"][:600]})
            return Diagnosis(kind=Kind.COLLECTIVE_MISMATCH, cause=f"PyTorch's own check found a collective mismatch on rank"
                             f" {t.rank}: {e['message'][:400]}", culprit_ranks=[t.rank], site=e.get("site"),
                             details={"torch_says": e["message"][:600]})
    # the group rule first (ranks that made other groups may also leave others connecting), with the ranks cut off
    # while connecting compared only on the groups they made before, then the ranks that left while others connected
    d = (group_mismatch(tracks, strict=True, excused=set(victims(tracks, outcomes)))
         if any(t.new_groups for t in tracks.values()) else None)
    if d is not None:
        return d
    d = left_while_connecting(tracks, outcomes)
    if d is not None:
        return _noted(d, _peer_words(tracks, outcomes, d.culprit_ranks + d.details["connecting"]))
    # on several hosts, start-up errors whose cause is where the ranks are: a loopback address gloo advertised, a
    # rank claimed twice (the store then times out on every rank: the same error everywhere says nothing)
    d = hosts.loopback_address(tracks) or hosts.duplicate_rank(tracks)
    if d is not None:
        return d
    d = framework.model_differs(tracks) or framework.unused_parameters(tracks)
    if d is not None:  # the ranks whose error the diagnosis explains are not told again as their peers
        told = set(d.culprit_ranks) | {int(r) for r in d.details.get("unused", {})}
        return _noted(d, _peer_words(tracks, outcomes, sorted(told)))
    d = (framework.uneven_steps(tracks, pend) or framework.left_the_loop(tracks, pend)
         or fsdp_words(bucket_mismatch(tracks, pend), tracks))
    if d is not None:
        return _noted(d, _peer_words(tracks, outcomes, d.culprit_ranks))
    d = busy_at_timeout(tracks, outcomes)  # before "who died first": a watchdog's abort is the victim's, not the cause
    if d is not None:
        return _noted(d, _peer_words(tracks, outcomes, d.culprit_ranks + d.details["timed_out"]))

    def first(ts):
        return min(ts, key=lambda t: (t.exit_t or float("inf"), t.rank))

    if crashed:
        t = first(crashed)
        p = t.pending or t.unwaited_collective
        if t.pending is not None:
            at = f" inside {words.call(p)} at {p.get('site')}"
        elif p is not None:  # gloo's thread ran it until a wait; the process died with it unfinished as far as it knew
            at = f" with its {words.call(p)} (started at {p.get('site')} with async_op=True) not yet waited on"
        else:
            at = " after its last traced call" if t.events else ""
        return Diagnosis(kind=Kind.RANK_CRASHED,
                         cause=f"Rank {t.rank} died ({words.exit_words(t.exit_code)}){at}."
                         + _peer_words(tracks, outcomes, [t.rank]),
                         culprit_ranks=[t.rank], op=p["op"] if p else None, group=p.get("group") if p else None,
                         seq=p.get("seq") if p else None, site=p.get("site") if p else None,
                         details={"exit_code": t.exit_code, "signal": words.signal_name(t.exit_code)})
    causes = [t for t in errored if not words.peer_lost((t.error or {}).get("message"))]
    if not causes and errored:
        # every error only says "a peer went away": the cause is a rank that was not in the call with them
        # a rank still inside its call when the run ended (its peer's exit not yet seen there) is in it too
        inside = {r: c for r, t in tracks.items() if (c := t.failed_call or t.pending) is not None}
        d = (framework.uneven_steps(tracks, inside) or fsdp_uneven(tracks, inside)
             or missing(tracks, inside, excused=victims(tracks, outcomes)))
        if d is not None:
            return _noted(d, _peer_words(tracks, outcomes, d.culprit_ranks))
        causes = errored
    if causes:
        return _rank_error(first(causes), tracks, errored, outcomes)
    return Diagnosis(kind=Kind.NONE, cause="The run failed without a recorded cause.")


def _rank_error(t: RankTrack, tracks, errored, outcomes) -> Diagnosis:
    e = t.error
    p = t.pending
    inside = f" inside {words.call(p)}" if p else ""
    at = f" at {e['site']}" if e.get("site") else " before any of its own code ran"
    same = [o.rank for o in errored if o.error and (o.error.get("type"), words.short(o.error.get("message", "")))
            == (e.get("type"), words.short(e.get("message", "")))]
    everyone = len(same) == len(tracks) > 1
    if everyone:
        head = f"All {len(tracks)} ranks raised the same error, {e['type']}: {words.short(e['message'])}"
        tail = ""
    else:
        head = f"Rank {t.rank} raised {e['type']}: {words.short(e['message'])}"
        tail = _peer_words(tracks, outcomes, [t.rank])
    return Diagnosis(kind=Kind.RANK_ERROR, cause=f"{head}{inside}{at}.{tail}",
                     culprit_ranks=sorted(same) if everyone else [t.rank], op=p["op"] if p else None,
                     group=p.get("group") if p else None, seq=p.get("seq") if p else None, site=e.get("site"),
                     details={"error": {k: e[k] for k in ("type", "message", "site") if k in e}})


def _noted(d: Diagnosis, note: str) -> Diagnosis:
    return d.noted(note.strip()) if note else d


def _peer_words(tracks, outcomes, culprits) -> str:
    """' Its peers saw: ...' (what the other ranks saw, ranks that saw the same thing named together), or ''."""
    saw: dict[str, list[int]] = {}
    for r, t in sorted(tracks.items()):
        if r in culprits:
            continue
        e = t.error
        if e and words.peer_lost(e.get("message")):  # a consequence: say so, once for all who saw it
            what = f"then lost its connection ({words.short(e['message'])[:80]})"
        elif e:
            what = f"got {e['type']}: {words.short(e['message'])[:200]}"
        elif outcomes.get(r) in ("hung", "stopped") and t.pending is not None:
            what = f"left waiting in {words.call(t.pending)}"
        else:
            continue
        saw.setdefault(what, []).append(r)
    parts = [f"{words.ranks(rs)} {'was' if len(rs) == 1 else 'were'} {what}" if what.startswith("left")
             else f"{words.ranks(rs)} {what.replace('its', 'its' if len(rs) == 1 else 'their', 1)}, a consequence"
             if what.startswith("then lost") else f"{words.ranks(rs)} {what}" for what, rs in saw.items()]
    return (" Its peers saw: " + "; ".join(parts) + ".") if parts else ""
