"""Calls from another thread: torch.distributed matches the collectives of a process group by the order each process
issues them, whatever the thread. A second thread (a metrics logger, a heartbeat, an asynchronous checkpoint, a
prefetcher) that issues collectives on a group the main thread also uses interleaves its calls with the main
thread's differently on each rank, so at the same call number one rank is in its thread's call and another in its
main loop's. The tracer records the thread of every call made outside the main thread (`thread`, its name).
"""
from __future__ import annotations

from dataclasses import replace

from sandbox.result import Kind
from sandbox.track import RankTrack
from sandbox.words import ranks as ranks_words

_KINDS = {Kind.COLLECTIVE_MISMATCH, Kind.MISSING_RANKS, Kind.RANK_ERROR, Kind.RANK_CRASHED, Kind.WAIT_CYCLE,
          Kind.STRAGGLER, Kind.NONE}
ADVICE = (" Calls on one process group are matched by the order each process issues them, whatever the thread, so a"
          " second thread's collectives on a group the main thread also uses fall between the main thread's calls at"
          " a different point on each rank. Give that thread a group of its own (made with `dist.new_group` on every"
          " rank, in the same order), or have the main thread wait for the thread's call before its next collective.")


def _calls_at(diagnosis, tracks: dict[int, RankTrack]) -> dict[int, dict]:
    """Each rank's call the failure stands on: its call of the diagnosis' number in the diagnosis' group (entered,
    whether or not it returned), else the call it is blocked in, else the call that raised. Where an earlier call of
    the group is the root (details["root"]: unlike calls that gloo or NCCL let complete), that call."""
    out = {}
    number = (diagnosis.details.get("root") or {}).get("seq", diagnosis.seq)
    for r, t in sorted(tracks.items()):
        at = None
        if number is not None and diagnosis.group:
            at = next((p for (_g, seq), p in t.by_bucket.items()
                       if seq == number and list(p.get("group") or ()) == list(diagnosis.group)), None)
        at = at or t.pending or t.failed_call
        if at is not None:
            out[r] = at
    return out


def explain_thread(diagnosis, tracks: dict[int, RankTrack]):
    """The diagnosis with a note naming the thread that made the odd call, and details["thread"]; None when every
    rank's call at the failure came from the same thread (by name; the main thread's carry none)."""
    if diagnosis.kind not in _KINDS or "thread" in diagnosis.details:
        return None
    at = _calls_at(diagnosis, tracks)
    threads = {r: p.get("thread") for r, p in at.items()}
    if len(at) < 2 or len(set(threads.values())) < 2 or not any(threads.values()):
        return None
    parts = []
    for name in sorted(set(threads.values()), key=lambda n: (n is not None, n or "")):
        rs = [r for r, n in threads.items() if n == name]
        p = at[rs[0]]
        origin = "the main thread" if name is None else f"the thread `{name}`" + (
            f" (in `{p['func']}`)" if p.get("func") else "")
        parts.append(f"{ranks_words(rs)}: {p.get('op')} at {p.get('site')}, from {origin}")
    note = "Where the ranks parted, their calls came from different threads: " + "; ".join(parts) + "." + ADVICE
    found = {str(r): n for r, n in threads.items()}
    return replace(diagnosis.noted(note), details={**diagnosis.details, "thread": found})
