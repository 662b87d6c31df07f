"""The rules: when can no rank move any more, and what is the cause, from per-rank tracks alone.

Hang detection is a rule: a run is deadlocked when no rank that is still alive can make progress, that is every
one of them is blocked in a distributed call that its peers cannot complete (they are elsewhere, gone, or waiting
in an incompatible call). `progress_possible` is that rule. Some deadlocks are certain the moment the last rank
blocks (`provable_deadlock`: every member of a group inside the same call #k with calls that cannot match; a cycle
of blocking point-to-point calls); the others need the watchdog's grace period. The `diagnose_*` functions name the
cause; `sandbox.policy` decides which one applies. The offline command is `python -m sandbox.diagnose DIR`.
"""
from __future__ import annotations

import re

from sandbox import branches, words
from sandbox.events import UNEVEN, RankTrack, is_collective, op_of, p2p_direction
from sandbox.result import Diagnosis

# an error that only says a peer went away: a consequence, not a cause
_PEER_LOST = re.compile(r"Connection (reset|closed) by peer|Broken pipe|failed to recv|EOF|peer.*(closed|died)|"
                        r"Socket Timeout|unbound_buffer|Timed out waiting|ProcessGroupGloo.*timeout", re.I)


# ----------------------------------------------------------------------------------------------- the hang rule

def _offers(q: RankTrack, direction: str, to: int, tag: int = 0) -> bool:
    """Does rank q have a send (or recv) towards rank `to`, with this tag, in flight, blocking or posted?"""
    cands = list(q.posted.values())
    if q.pending is not None:
        cands.append(q.pending)
    return any(p2p_direction(p) == direction and p.get("peer") in (to, None) and p.get("tag", 0) == tag
               for p in cands)


def call_key(p: dict) -> tuple:
    """What must be equal on every rank at one collective: group, sequence number, and its signature."""
    op = op_of(p)
    sig = (op, p.get("root")) if op in UNEVEN else p.get("sig")
    return p.get("gname"), p.get("seq"), sig, p.get("group")


def _new_group_members(p: dict, tracks: dict[int, RankTrack]) -> list[int]:
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


def can_complete(p: dict, me: RankTrack, tracks: dict[int, RankTrack]) -> bool:
    """Could the pending call `p` of rank `me` finish given what every other rank is doing now?"""
    live = {r: t for r, t in tracks.items() if not t.finished}
    if p["op"] == "init_process_group":
        return all(r in live and live[r].pending is not None and live[r].pending["op"] == "init_process_group"
                   and live[r].pending.get("endpoint") == p.get("endpoint")
                   and live[r].pending.get("world_size") == p.get("world_size") for r in p.get("group") or [])
    if p["op"] == "new_group":
        return all(r in live and _at_new_group(live[r], p) for r in _new_group_members(p, tracks))
    if is_collective(p):
        members = p.get("group")
        if not members:
            return True
        key = call_key(p)
        for r in members:
            q = tracks.get(r)
            if q is None:
                return False
            if q.pending is not None and is_collective(q.pending) and call_key(q.pending) == key:
                continue
            # a live peer that already got through this very call did its part (a broadcast's root leaves early);
            # once it has exited, the ranks still inside can only be hung, whatever it passed
            bucket = (p.get("gname"), p.get("seq"))
            done = q.by_bucket.get(bucket)
            if r in live and done is not None and q.passed.get(bucket) and call_key(done) == key:
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
    group has entered the same call #k of it and the calls cannot match, or (b) blocking point-to-point calls form
    a cycle with nothing posted that could match them. Call only when `progress_possible` is False."""
    live = {r: t for r, t in tracks.items() if not t.finished}
    pend = {r: t.pending for r, t in live.items() if t.pending is not None}
    if len(pend) < len(live) or any(t.inflight for t in live.values()):
        return False  # a rank busy in its own code, or a GPU call still running, may yet move
    buckets: dict = {}
    for r, p in pend.items():
        if is_collective(p) and p.get("group") and p.get("seq") is not None:
            buckets.setdefault((p.get("gname"), p["seq"]), {})[r] = p
    for members in buckets.values():
        group = next(iter(members.values()))["group"]
        if set(members) == set(group) and len({repr(call_key(p)) for p in members.values()}) > 1:
            return True
    cycle = _p2p_cycle(pend)
    return cycle is not None and not any(live[r].posted for r in cycle)


def _p2p_cycle(pend: dict[int, dict]) -> list[int] | None:
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


# ----------------------------------------------------------------------------------------------- naming the cause

def _minority(groups: dict) -> list[int]:
    """Ranks of the smallest camp; on a tie the camp without the lowest rank."""
    camps = sorted(groups.values(), key=lambda rs: (len(rs), -min(rs)))
    return sorted(camps[0])


def _init_mismatch(tracks) -> Diagnosis | None:
    seen = {}
    for t in tracks.values():
        if t.inits:
            p = t.inits[-1]
            seen.setdefault((p.get("endpoint"), p.get("world_size")), []).append(t.rank)
    if len(seen) < 2:
        return None
    # the launcher's endpoint (MASTER_ADDR:MASTER_PORT) is the right one: the others are the culprits
    launcher = None
    for t in tracks.values():
        for p in t.inits:
            if p.get("MASTER_PORT"):
                host = p.get("MASTER_ADDR") if p.get("MASTER_ADDR") not in ("localhost",) else "127.0.0.1"
                launcher = f"{host}:{p['MASTER_PORT']}"
    culprits = [r for (ep, _), rs in seen.items() if ep != launcher for r in rs] if launcher else []
    if not culprits or len(culprits) == sum(len(v) for v in seen.values()):
        culprits = _minority(seen)
    parts = [f"{words.ranks(rs)} at {ep} (world size {ws}, {tracks[rs[0]].inits[-1].get('init_method')})"
             for (ep, ws), rs in seen.items()]
    p = tracks[culprits[0]].inits[-1]
    return Diagnosis(kind="init_mismatch",
                     cause="The ranks disagree on the rendezvous, so they can never meet: " + "; ".join(parts) +
                     (f". The launcher's endpoint is {launcher} (MASTER_ADDR:MASTER_PORT);"
                      f" {words.ranks(culprits)} {'uses' if len(culprits) == 1 else 'use'} another"
                      f" ({p.get('init_method')} at {p.get('site')})." if launcher else "."),
                     culprit_ranks=culprits, op="init_process_group", seq=0, site=p.get("site"),
                     details={"endpoints": {f"{ep} ws={ws}": rs for (ep, ws), rs in seen.items()}, "launcher": launcher})


def _group_mismatch(tracks, strict: bool) -> Diagnosis | None:
    hist = {r: [tuple(g["ranks"]) if isinstance(g.get("ranks"), list) else ("all",) for g in t.new_groups
                if not g.get("local_sync")]  # groups made with use_local_synchronization involve only members
            for r, t in tracks.items() if t.hello is not None or t.events}
    if not hist:
        return None
    longest = max(len(h) for h in hist.values())
    for k in range(longest):
        at = {r: (h[k] if k < len(h) else None) for r, h in hist.items()}
        camps: dict = {}
        for r, g in at.items():
            camps.setdefault(g, []).append(r)
        if len(camps) < 2:
            continue
        if None in camps and not strict and len(camps) == 2:
            continue  # some ranks simply have not created this group yet
        culprits = _minority(camps)
        describe = "; ".join(
            (f"{words.ranks(rs)} created {list(g)}" if g is not None else f"{words.ranks(rs)} never made this call")
            for g, rs in camps.items())
        site = next((tracks[r].new_groups[k].get("site") for r in culprits if k < len(tracks[r].new_groups)), None)
        return Diagnosis(kind="group_mismatch",
                         cause=f"The ranks created process groups differently at their new_group call #{k + 1}: {describe}."
                         " Every rank must call every new_group, with the same ranks, in the same order"
                         " (group names come from that order), so these groups never connect.",
                         culprit_ranks=culprits, op="new_group", seq=k + 1, site=site,
                         details={"index": k + 1, "camps": {str(g): rs for g, rs in camps.items()}})
    return None


def _bucket_mismatch(tracks, pend: dict[int, dict]) -> Diagnosis | None:
    """Ranks at the same call of the same group, calling different things."""
    buckets: dict = {}
    for r, p in pend.items():
        if is_collective(p):
            buckets.setdefault((p.get("gname"), p.get("seq")), {})[r] = p
    # also ranks that already passed this call (a crash ends one side early): use their recorded event
    for key, members in buckets.items():
        group = next(iter(members.values())).get("group")
        for r, t in tracks.items():
            if r not in members and key in t.by_bucket and t.by_bucket[key].get("group") == group:
                members[r] = t.by_bucket[key]
    for (gname, seq), members in sorted(buckets.items(), key=lambda kv: min(p["t"] for p in kv[1].values())):
        if len({tuple(p.get("group") or ()) for p in members.values()}) > 1:
            continue  # different memberships: a group mismatch, named elsewhere
        camps: dict = {}
        for r, p in members.items():
            op = op_of(p)
            sig = (op, p.get("root"), "" if op in UNEVEN else str(p.get("shapes")), str(p.get("dtypes")))
            camps.setdefault(sig, []).append(r)
        if len(camps) < 2:
            continue
        culprits = _minority(camps)
        ex = members[culprits[0]]
        parts = [f"{words.ranks(rs)} {'calls' if len(rs) == 1 else 'call'} {words.signature(members[rs[0]])}"
                 f" at {members[rs[0]].get('site')}" for rs in sorted(camps.values(), key=len, reverse=True)]
        what = []
        ops = {s[0] for s in camps}
        if len(ops) > 1:
            what.append("op")
        if len(ops) == 1 and len({s[1] for s in camps}) > 1:
            what.append("root")
        if len({s[2] for s in camps}) > 1:
            what.append("shape")
        if len({s[3] for s in camps}) > 1:
            what.append("dtype")
        branch = rank_branch_of(camps, members, tracks)
        return Diagnosis(kind="collective_mismatch",
                         cause=f"Collective mismatch at call #{seq} of group {ex.get('group')}: " + "; ".join(parts) +
                         f". The {'/'.join(what) or 'call'} must be the same on every rank of the group."
                         + (f" {branch['words']}" if branch else ""),
                         culprit_ranks=culprits, op=op_of(ex), group=ex.get("group"), seq=seq, site=ex.get("site"),
                         details={"calls": {str(r): words.call(p) for r, p in sorted(members.items())}, "differs_in": what,
                          **({"branch": {k: v for k, v in branch.items() if k != "words"}} if branch else {})})
    return None


def rank_branch_of(camps: dict, members: dict[int, dict], tracks: dict[int, RankTrack]) -> dict | None:
    """Ranks that disagree at one call, one camp of them having got there through a rank-dependent `if` (read
    from a hung rank's stack, else from the call's site): that branch, and a sentence saying so."""
    def branch(r):
        t = tracks.get(r)
        frames = (branches.stack_frames(t.stack if t is not None else None)
                  or branches.site_frame(members[r].get("site")))
        return branches.rank_branch(frames)

    found = {tuple(rs): branch(rs[0]) for rs in camps.values()}
    for rs in sorted(camps.values(), key=len):  # the fewest first: usually the ones that took the branch
        b = found[tuple(rs)]
        if b is None:
            continue
        others = sorted(set(members) - set(rs))
        other = next((o for k, o in found.items() if k != tuple(rs) and o and o["site"] == b["site"]), None)
        rest = "took its else" if other and other["taken"] != b["taken"] and b["taken"] == "if" else "skipped it"
        p = members[rs[0]]
        b["ranks"] = sorted(rs)
        b["words"] = (f"{words.ranks(rs).capitalize()} reached {words.signature(p)} at {p.get('site')} "
                      f"{branches.through(b)}; {words.ranks(others)} {rest}.")
        return b
    return None


def _p2p(tracks, pend) -> Diagnosis | None:
    waits = {r: p for r, p in pend.items() if p2p_direction(p) and p.get("peer") is not None}
    cycle = _p2p_cycle(pend)
    if cycle is not None:
        kinds = {p2p_direction(waits[c]) for c in cycle}
        tags = {waits[c].get("tag", 0) for c in cycle}
        steps = "; ".join(f"rank {c} blocks in {words.call(waits[c])}"
                          f"{' (tag ' + str(waits[c].get('tag', 0)) + ')' if len(tags) > 1 else ''}"
                          f" at {waits[c].get('site')}" for c in cycle)
        advice = (" Post both sides with isend/irecv (or batch_isend_irecv) before waiting, or order them by rank"
                  " (even ranks send first).")
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
        return _new_group_members(p, tracks)
    return None


def _missing(tracks, pend) -> Diagnosis | None:
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
                         cause=f"{words.ranks(same)} {'waits' if len(same) == 1 else 'wait'} in {words.call(p)} at"
                         f" {p.get('site')}, but {words.ranks(absent)} never"
                         f" {'arrives' if len(absent) == 1 else 'arrive'}: {detail}.",
                         culprit_ranks=absent, op=op, group=members, seq=p.get("seq"), site=p.get("site"), details={"waiting": same, "elsewhere": elsewhere})
    return None


def lost_peer(t: RankTrack) -> bool:
    """Did this rank's own code fail only because a peer went away (a consequence, not a cause)?"""
    return t.error is not None and bool(_PEER_LOST.search(t.error.get("message", "")))


def blocked_call(t: RankTrack) -> dict | None:
    """The call a rank was stuck in: the one it is inside, or, when that call raised only because a peer went away
    (its launcher ended the peer: torchrun tearing a hung job down), the call that raised."""
    if t.pending is not None:
        return t.pending
    return t.failed_call if lost_peer(t) else None


def diagnose_hang(tracks: dict[int, RankTrack]) -> Diagnosis:
    pend = {r: blocked_call(t) for r, t in tracks.items() if blocked_call(t) is not None}
    for finder in (lambda: _init_mismatch(tracks), lambda: _group_mismatch(tracks, strict=True),
                   lambda: _bucket_mismatch(tracks, pend), lambda: _p2p(tracks, pend), lambda: _missing(tracks, pend)):
        d = finder()
        if d is not None:
            return d
    parts = "; ".join(f"rank {r} {words.where(t)}" for r, t in sorted(tracks.items()))
    return Diagnosis(kind="none", cause=f"Every rank is blocked and none can finish, but the pattern is not one the sandbox"
                             f" names: {parts}.")


def diagnose_failure(tracks: dict[int, RankTrack], outcomes: dict[int, str]) -> Diagnosis:
    """A rank crashed or raised: name the first real cause, and what its peers saw."""
    crashed = [t for r, t in tracks.items() if outcomes.get(r) == "crashed"]
    errored = [t for r, t in tracks.items() if outcomes.get(r) == "error"]
    # where each rank was: the call it is inside, or the distributed call that raised
    pend = {r: t.pending or t.failed_call for r, t in tracks.items() if (t.pending or t.failed_call) is not None}
    for t in errored:  # TORCH_DISTRIBUTED_DEBUG=DETAIL names the mismatch itself
        e = t.error
        if e and "mismatch between collectives" in e.get("message", ""):
            d = _bucket_mismatch(tracks, pend)
            if d is not None:
                d.details["torch_says"] = e["message"][:600]
                return d
            return Diagnosis(kind="collective_mismatch", cause=f"PyTorch's own check found a collective mismatch on rank"
                             f" {t.rank}: {e['message'][:400]}", culprit_ranks=[t.rank], site=e.get("site"),
                             details={"torch_says": e["message"][:600]})
    d = _group_mismatch(tracks, strict=True) if any(t.new_groups for t in tracks.values()) else None
    if d is not None:
        return d
    d = _bucket_mismatch(tracks, pend)
    if d is not None:
        return _noted(d, _peer_words(tracks, outcomes, d.culprit_ranks))

    def first(ts):
        return min(ts, key=lambda t: (t.exit_t or float("inf"), t.rank))

    if crashed:
        t = first(crashed)
        p = t.pending
        at = f" inside {words.call(p)} at {p.get('site')}" if p else (" after its last traced call" if t.events else "")
        return Diagnosis(kind="rank_crashed",
                         cause=f"Rank {t.rank} died ({words.exit_words(t.exit_code)}){at}."
                         + _peer_words(tracks, outcomes, [t.rank]),
                         culprit_ranks=[t.rank], op=p["op"] if p else None, group=p.get("group") if p else None,
                         seq=p.get("seq") if p else None, site=p.get("site") if p else None,
                         details={"exit_code": t.exit_code, "signal": words.signal_name(t.exit_code)})
    causes = [t for t in errored if not _PEER_LOST.search((t.error or {}).get("message", ""))]
    if not causes and errored:
        # every error only says "a peer went away": the cause is a rank that was not in the call with them
        inside = {r: t.failed_call for r, t in tracks.items() if t.failed_call is not None}
        d = _missing(tracks, inside)
        if d is not None:
            return _noted(d, _peer_words(tracks, outcomes, d.culprit_ranks))
        causes = errored
    if causes:
        t = first(causes)
        e = t.error
        p = t.pending
        inside = f" inside {words.call(p)}" if p else ""
        at = f" at {e['site']}" if e.get("site") else " before any of its own code ran"
        same = [o.rank for o in errored if o.error and (o.error.get("type"), words.short(o.error.get("message", "")))
                == (e.get("type"), words.short(e.get("message", "")))]
        if len(same) == len(tracks) > 1:
            head = f"All {len(tracks)} ranks raised the same error, {e['type']}: {words.short(e['message'])}"
            tail = ""
        else:
            head = f"Rank {t.rank} raised {e['type']}: {words.short(e['message'])}"
            tail = _peer_words(tracks, outcomes, [t.rank])
        return Diagnosis(kind="rank_error", cause=f"{head}{inside}{at}.{tail}", culprit_ranks=sorted(same) if len(same) == len(tracks) > 1
                         else [t.rank], op=p["op"] if p else None, group=p.get("group") if p else None,
                         seq=p.get("seq") if p else None, site=e.get("site"),
                         details={"error": {k: e[k] for k in ("type", "message", "site") if k in e}})
    return Diagnosis(kind="none", cause="The run failed without a recorded cause.")


def _noted(d: Diagnosis, note: str) -> Diagnosis:
    return d.noted(note.strip()) if note else d


def _peer_words(tracks, outcomes, culprits) -> str:
    """' Its peers saw: ...' (what the other ranks saw, ranks that saw the same thing named together), or ''."""
    saw: dict[str, list[int]] = {}
    for r, t in sorted(tracks.items()):
        if r in culprits:
            continue
        e = t.error
        if e:
            what = f"got {e['type']}: {words.short(e['message'])[:200]}"
        elif outcomes.get(r) in ("hung", "stopped") and t.pending is not None:
            what = f"left waiting in {words.call(t.pending)}"
        else:
            continue
        saw.setdefault(what, []).append(r)
    parts = [f"{words.ranks(rs)} {'was' if len(rs) == 1 else 'were'} {what}" if what.startswith("left")
             else f"{words.ranks(rs)} {what}" for what, rs in saw.items()]
    return (" Its peers saw: " + "; ".join(parts) + ".") if parts else ""


def _waiting_and_busy(tracks):
    busy = [t for t in tracks.values() if not t.finished and t.pending is None]
    waiting = [t for t in tracks.values() if not t.finished and t.pending is not None]
    return busy, waiting


def diagnose_timeout(tracks: dict[int, RankTrack], timeout: float) -> Diagnosis:
    busy, waiting = _waiting_and_busy(tracks)
    if busy and waiting:
        w = waiting[0]
        return Diagnosis(kind="straggler",
                         cause=f"Not a deadlock: {words.ranks([t.rank for t in busy])} {'was' if len(busy) == 1 else 'were'}"
                         f" {words.where(busy[0])} when the {timeout:g} s timeout passed, while"
                         f" {words.ranks([t.rank for t in waiting])} waited in {words.call(w.pending)} at"
                         f" {w.pending.get('site')}.",
                         culprit_ranks=[t.rank for t in busy], op=w.pending["op"], group=w.pending.get("group"), seq=w.pending.get("seq"),
                         site=w.pending.get("site"), details={"busy": {str(t.rank): words.where(t) for t in busy}})
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
