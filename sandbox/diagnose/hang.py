"""Naming the cause of a hang, a timeout or an interrupted run: every rank is blocked (or the clock ran out), and
the rules say why, first match wins: a rendezvous mismatch (on several hosts also a loopback endpoint, or a rank
claimed twice: `hosts`), a group mismatch, a collective mismatch, a cycle of waits across groups (`cycles`), a cycle
of point-to-point calls, a point-to-point call that nothing matches, or ranks that never arrive. `busy_at_timeout` names the other kind of timeout, the one a
process group's own clock ends: peers gave up at a collective while a rank was still running its own code.
"""
from __future__ import annotations

import re

from sandbox import _paths, branches, words
from sandbox.calls import is_collective, op_of, p2p_direction
from sandbox.diagnose import cycles, framework, hosts, origins, positions
from sandbox.diagnose.connect import left_while_connecting, victims
from sandbox.diagnose.mismatch import bucket_mismatch, group_mismatch, init_mismatch
from sandbox.diagnose.progress import new_group_members, p2p_cycle, progress_possible
from sandbox.diagnose.sharding import fsdp_uneven, fsdp_words
from sandbox.events import RankTrack
from sandbox.result import Diagnosis, Kind

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
        if kinds == {"send", "recv"} and len(tags) > 1:  # the pair would meet, but for the tags: no cycle
            return Diagnosis(kind=Kind.P2P_UNMATCHED, cause=f"Unmatched point-to-point call: {steps}. The send and the"
                             " recv name different tags, so they never match. Use the same tag on both sides.",
                             culprit_ranks=sorted(cycle), op=op_of(waits[cycle[0]]), site=waits[cycle[0]].get("site"),
                             details={"pair": sorted(cycle), "tags": sorted(tags)})
        if kinds == {"send"}:
            why = "a gloo send does not complete until the peer posts the matching recv, so each waits for the other"
        else:
            why = "each waits for a message the other will only send after its own call returns"
        return Diagnosis(kind=Kind.P2P_CYCLE, cause=f"Point-to-point cycle: {steps}. {why[0].upper() + why[1:]}.{P2P_ADVICE}",
                         culprit_ranks=sorted(cycle), op=op_of(waits[cycle[0]]), site=waits[cycle[0]].get("site"),
                         details={"cycle": cycle})
    m = missing(tracks, pend, excused=victims(tracks))
    if m is not None and len(m.details.get("waiting", [])) > 1:
        return m  # several ranks wait in a collective for one held in a point-to-point call: that one is missing
    for start in sorted(waits):
        chain = [start]  # rank 0 waits on 1, which waits on 2, ...: the last link is the one nothing will match
        while waits[chain[-1]]["peer"] in waits and waits[chain[-1]]["peer"] not in chain:
            chain.append(waits[chain[-1]]["peer"])
        r, p = chain[-1], waits[chain[-1]]
        q = tracks.get(p["peer"])
        if q is None:
            continue
        behind = (f" {words.ranks(chain[:-1]).capitalize()} {'waits' if len(chain) == 2 else 'wait'} behind it: "
                  + ", ".join(f"rank {a} in {words.call(waits[a])} at {waits[a].get('site')}" for a in chain[:-1])
                  + "." if len(chain) > 1 else "")
        return Diagnosis(kind=Kind.P2P_UNMATCHED,
                         cause=f"Unmatched point-to-point call: rank {r} waits in {words.call(p)} at {p.get('site')},"
                         f" but rank {q.rank} is {words.where(q)}, and nothing there matches it: every"
                         f" {'send needs a recv' if p2p_direction(p) == 'send' else 'recv needs a send'} from its"
                         f" peer, with the same tag.{behind}",
                         culprit_ranks=sorted({r, q.rank}), op=op_of(p), site=p.get("site"),
                         details={"waiting": chain, "elsewhere": {str(q.rank): words.where(q)}})
    return None


def _members(p: dict, tracks) -> list[int] | None:
    if is_collective(p) or p["op"] == "init_process_group":
        return p.get("group")
    if p["op"] == "new_group":
        return new_group_members(p, tracks)
    return None


def missing(tracks, pend, excused=()) -> Diagnosis | None:
    """The call that the most ranks wait in while others of its group never arrive (the earliest on a tie): when
    ranks 0 and 2 wait for rank 1 in an all_reduce and rank 1 waits for rank 0 in a sub-group's barrier, rank 1 is
    named, whichever of those calls was entered first. `excused`: ranks kept from the call by another rank's leaving
    (`connect.victims`): neither waiting nor to blame."""
    found = []
    for r, p in sorted(pend.items(), key=lambda kv: kv[1]["t"]):
        members = _members(p, tracks)
        if not members or r in excused:
            continue
        op = op_of(p)
        same = [m for m in members if m in pend and op_of(pend[m]) == op and pend[m].get("seq") == p.get("seq")
                and pend[m].get("gname") == p.get("gname")]
        absent = [m for m in members if m not in same and m not in excused]
        if absent:
            found.append((p, op, members, same, absent))
    if found:
        p, op, members, same, absent = max(found, key=lambda f: len(f[3]))  # max() keeps the first of a tie
        elsewhere = {str(m): words.where(tracks[m]) if m in tracks else "never started" for m in absent}
        detail = "; ".join(f"rank {m} is {w}" for m, w in elsewhere.items())
        b = _data_branch(tracks, same, absent, p)
        if b is not None and "loop" in b:  # the call is in a loop whose rounds an `if` on the rank's data adds
            because = (f" {words.ranks(same).capitalize()} made it in the loop at {b['loop']} over"
                       f" `{b['container']}`, which has more rounds on some ranks: {positions.filled_words(b)}"
                       f"{origins.because(b)}."
                       f" {origins.advice(b)}")
        else:
            because = (f" {words.ranks(same).capitalize()} reached it {branches.through(b)}{origins.because(b)}."
                       f" {origins.advice(b)}" if b else "")
        return Diagnosis(kind=Kind.MISSING_RANKS,
                         cause=f"{words.ranks(same).capitalize()} {'waits' if len(same) == 1 else 'wait'} in {words.call(p)} at"
                         f" {p.get('site')}, but {words.ranks(absent)} never"
                         f" {'arrives' if len(absent) == 1 else 'arrive'}: {detail}.{because}",
                         culprit_ranks=absent, op=op, group=members, seq=p.get("seq"), site=p.get("site"),
                         details={"waiting": same, "elsewhere": elsewhere, **({"branch": b} if b else {})})
    return None


def _data_branch(tracks, same: list[int], absent: list[int], p: dict) -> dict | None:
    """The data-dependent `if` (origins.data_branch) the waiting ranks reached their call through, when every rank
    that never arrives ran and is not waiting under that same `if` (so it went the other way). None under a
    rank-dependent `if`: the words for that one are the mismatch rule's, not said here."""
    frames = branches.frames_of(tracks.get(same[0]), p)
    b = None if branches.rank_branch(frames) else (origins.data_branch(frames) or positions.loop_branch(frames))
    if b is None or any(m not in tracks or not tracks[m].events for m in absent):
        return None  # a rank that never ran (or made no call) did not take the branch's other way: it never got there
    for m in absent:
        q = tracks[m].pending
        if q is not None and (origins.data_branch(branches.frames_of(tracks[m], q)) or {}).get("site") == b["site"]:
            return None
    return b


def lost_peer(t: RankTrack) -> bool:
    """Did this rank's own code fail only because a peer went away (a consequence, not a cause)? Read from its error
    record, or, when the sandbox ended it before that was written, from the error its last call raised."""
    if t.error is not None:
        return words.peer_lost(t.error.get("message"))
    return t.failed_with is not None and words.peer_lost(t.failed_with)


def blocked_call(t: RankTrack) -> dict | None:
    """The call a rank was stuck in: the one it is inside, or, when that call raised only because a peer went away
    (its launcher ended the peer: torchrun tearing a hung job down), the call that raised."""
    if t.pending is not None:
        return t.pending
    return t.failed_call if lost_peer(t) else None


def diagnose_hang(tracks: dict[int, RankTrack]) -> Diagnosis:
    pend = {r: blocked_call(t) for r, t in tracks.items() if blocked_call(t) is not None}
    for finder in (lambda: hosts.loopback_rendezvous(tracks), lambda: hosts.duplicate_rank(tracks),
                   lambda: init_mismatch(tracks),
                   lambda: group_mismatch(tracks, strict=True, excused=set(victims(tracks))),
                   lambda: left_while_connecting(tracks),
                   lambda: framework.uneven_steps(tracks, pend), lambda: framework.left_the_loop(tracks, pend),
                   lambda: framework.bucket_without_partner(tracks, pend),
                   lambda: fsdp_words(bucket_mismatch(tracks, pend), tracks),
                   lambda: fsdp_uneven(tracks, pend), lambda: cycles.wait_cycle(tracks, pend),
                   lambda: p2p(tracks, pend),
                   lambda: missing(tracks, pend, excused=victims(tracks))):
        d = finder()
        if d is not None:
            return d
    parts = "; ".join(f"rank {r} {words.where(t)}" for r, t in sorted(tracks.items()))
    return Diagnosis(kind=Kind.NONE, cause=f"Every rank is blocked and none can finish, but the pattern is not one the"
                     f" sandbox names: {parts}.")


def _waiting_and_busy(tracks):
    busy = [t for t in tracks.values() if not t.finished and t.pending is None]
    waiting = [t for t in tracks.values() if not t.finished and t.pending is not None]
    return busy, waiting


def diagnose_timeout(tracks: dict[int, RankTrack], timeout: float) -> Diagnosis:
    busy, waiting = _waiting_and_busy(tracks)
    if busy and waiting:
        w = waiting[0]
        return Diagnosis(kind=Kind.STRAGGLER,
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
    return Diagnosis(kind=Kind.NONE, cause=f"The run did not finish within {timeout:g} s; no rank was waiting on"
                     f" another ({'; '.join(f'rank {t.rank} {words.where(t)}' for t in busy)}).")


def diagnose_interrupted(tracks: dict[int, RankTrack]) -> Diagnosis:
    """Where every rank was when the run was interrupted (Ctrl-C or SIGTERM)."""
    busy, waiting = _waiting_and_busy(tracks)
    if not busy and not waiting:
        return Diagnosis(kind=Kind.NONE, cause="Interrupted after every rank had finished.")
    parts = "; ".join(f"rank {t.rank} {words.where(t)}" for t in sorted(busy + waiting, key=lambda t: t.rank))
    d = Diagnosis(kind=Kind.NONE, cause=f"Interrupted before the run ended: {parts}.")
    if waiting and not busy and not progress_possible(tracks):
        hang = diagnose_hang(tracks)  # it was a deadlock already: say which, as the hang rule would have
        if hang.kind != Kind.NONE:
            return hang.led_by("Interrupted while deadlocked.")
    return d


# what a rank says when its own collective hit the process group's timeout (gloo's wait for a peer's data, NCCL's
# watchdog): the message of the waiting side, never of the rank it waited for
PG_TIMED_OUT = re.compile(r"Timed out waiting \d+ ?ms|Watchdog caught collective operation timeout|"
                          r"operation timed out|Timeout\(ms\)=|wait timeout after \d+ ?ms", re.I)
STRAGGLER_ADVICE = (" Give that step more time on every rank (a group of its own made with new_group(timeout=...),"
                    " or a longer init_process_group timeout on all ranks), move it out of the way of the others"
                    " (an asynchronous save, torch.distributed.checkpoint.async_save), or wait with"
                    " monitored_barrier(timeout=...), whose error names the rank to look at.")
_STACK_FRAME = re.compile(r'\s+File "(.+)", line (\d+) in (\S+)')


def _timed_out_at(t: RankTrack, crashed: bool) -> tuple[dict, float] | None:
    """(the collective, when it failed) for a rank whose collective ended at the group's timeout: an error that
    says so, or (NCCL: the watchdog aborts the process) a crash inside a collective. init_process_group counts: its
    rendezvous waits for every rank's key in the store up to the same timeout (DistStoreError: wait timeout)."""
    call = t.pending if crashed else t.failed_call
    if call is None or not (is_collective(call) or call.get("op") == "init_process_group"):
        return None
    if crashed:  # only NCCL's watchdog ends a process at the timeout; gloo aborts (SIGABRT) on a mismatch at once
        return (call, t.exit_t) if t.exit_t is not None and _on_a_gpu(t, call) else None
    if not PG_TIMED_OUT.search((t.error or {}).get("message", "")):
        return None
    end = next((ev for ev in reversed(t.events) if ev.get("ev") == "exit" and ev.get("id") == call.get("id")), None)
    return call, (end or {}).get("t", call.get("t", 0.0))


def _on_a_gpu(t: RankTrack, call: dict) -> bool:
    """Did the call (or, for a wait, the asynchronous call it waits on) run on a GPU's tensors (NCCL)?"""
    if call.get("op") == "wait":
        call = next((ev for ev in t.events if ev.get("ev") == "enter" and ev.get("id") == call.get("of_id")), call)
    return any(str(d).startswith("cuda") for d in call.get("devices") or ())


def _in_a_call_at(t: RankTrack, when: float) -> bool:
    """Was rank t inside a distributed call at time `when` (entered before, not yet returned)?"""
    exits = {ev.get("id"): ev.get("t", 0.0) for ev in t.events if ev.get("ev") in ("exit", "done")}
    return any(ev.get("ev") == "enter" and ev.get("t", 0.0) <= when and exits.get(ev.get("id"), float("inf")) > when
               for ev in t.events)


def user_frames(stack: str | None) -> list[str]:
    """'file:line (in function)' of the user's frames of a faulthandler dump, innermost first, from the first thread
    that has any (the same rule as the tracer's call sites: not torch, not the sandbox's plumbing)."""
    for block in re.split(r"\n(?=\S)", stack or ""):
        found = [f"{_paths.shown_path(m.group(1))}:{m.group(2)} (in {m.group(3)})"
                 for m in map(_STACK_FRAME.match, block.splitlines())
                 if m and not (_paths.is_plumbing(m.group(1)) or _paths.is_stdlib(m.group(1)) or m.group(1).startswith("<"))]
        if found:
            return found
    return []


def _where_busy(t: RankTrack, when: float) -> tuple[str, str | None]:
    """Where a rank that was in no call at `when` was: its stack, if it is still outside any call; else between
    its last call before then and its first call after."""
    frames = user_frames(t.stack) if t.pending is None else []
    if frames:
        caller = f", called from {frames[1]}" if len(frames) > 1 else ""
        return f"running its own code at {frames[0]}{caller}", frames[0].split(" (")[0]
    enters = [ev for ev in t.events if ev.get("ev") == "enter"]
    before = [ev for ev in enters if ev.get("t", 0.0) <= when]
    after = [ev for ev in enters if ev.get("t", 0.0) > when]
    said = "running its own code"
    if before:
        said += f" after {words.call(before[-1])} at {before[-1].get('site')} had returned"
    if after:
        said += f"; it reached {words.call(after[0])} at {after[0].get('site')} {after[0]['t'] - when:.1f} s later"
    return said, before[-1].get("site") if before else None


def busy_at_timeout(tracks: dict[int, RankTrack], outcomes: dict[int, str]) -> Diagnosis | None:
    """Ranks whose collective hit the process group's timeout while a peer of that call was in no distributed call
    at all, busy in its own code (a checkpoint written by rank 0 while the others wait at a barrier): that peer is
    the cause, not hung and not missing, and the ranks that timed out are its victims."""
    timed = {}
    for r, t in tracks.items():
        got = _timed_out_at(t, outcomes.get(r) == "crashed") if outcomes.get(r) in ("error", "crashed") else None
        if got is not None:
            timed[r] = got
    if not timed:
        return None
    first = min(timed, key=lambda r: timed[r][1])
    call, when = timed[first]
    busy = [q for r, q in sorted(tracks.items())
            if r not in timed and r in (call.get("group") or ()) and (q.hello is not None or q.events)
            and not (q.end is not None and q.end.get("t", when) < when) and not _in_a_call_at(q, when)
            and not (outcomes.get(r) == "crashed" and q.exit_t is not None and q.exit_t < when)]  # dead, not busy
    if not busy:
        return None
    where = {q.rank: _where_busy(q, when) for q in busy}
    msg = next((words.short(tracks[r].error["message"]) for r in sorted(timed) if tracks[r].error), None)
    said = f" ({msg[:160]})" if msg else " (the process was aborted: NCCL's watchdog)"
    waiting = sorted(timed)
    cause = (f"Not a hang: {words.ranks(waiting)} timed out in {words.call(call)} at {call.get('site')}{said}"
             f" while {'; '.join(f'rank {r} was {w}' for r, (w, _) in where.items())}, outside any torch.distributed"
             f" call. {words.ranks(list(where)).capitalize()} {'is' if len(where) == 1 else 'are'} the cause: not"
             f" hung and not missing, but slower than the process group's timeout at that line; the ranks that"
             f" timed out only waited for {'it' if len(where) == 1 else 'them'}." + STRAGGLER_ADVICE)
    return Diagnosis(kind=Kind.STRAGGLER, cause=cause, culprit_ranks=sorted(where), op=op_of(call),
                     group=call.get("group"), seq=call.get("seq"),
                     site=next(iter(where.values()))[1] or call.get("site"),
                     details={"busy": {str(r): w for r, (w, _) in where.items()}, "timed_out": waiting,
                              "waiting_at": call.get("site")})
