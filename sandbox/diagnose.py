"""Per-rank traces + stacks + exits -> one verdict and a sentence a person understands.

The same code judges a live run (`sandbox.launch` feeds it events as they arrive) and a directory of trace files
brought home from a real cluster:

    python -m sandbox.diagnose traces/        # written by `torchrun ... -m sandbox.trace --trace-dir traces/ ...`

Hang detection is a rule: a run is deadlocked when no rank that is still alive can make progress, that is every
one of them is blocked in a distributed call that its peers cannot complete (they are elsewhere, gone, or waiting
in an incompatible call). `progress_possible` is that rule; `diagnose` names the cause.
"""
from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections import Counter
from dataclasses import dataclass, field

COLLECTIVE = {"all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "reduce_scatter",
              "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast", "reduce", "gather", "scatter",
              "barrier", "monitored_barrier", "all_gather_object", "gather_object", "broadcast_object_list",
              "scatter_object_list"}
SENDS = {"send", "isend", "send_object_list"}
RECVS = {"recv", "irecv", "recv_object_list"}
# an error that only says a peer went away: a consequence, not a cause
_PEER_LOST = re.compile(r"Connection (reset|closed) by peer|Broken pipe|failed to recv|EOF|peer.*(closed|died)|"
                        r"Socket Timeout|unbound_buffer|Timed out waiting|ProcessGroupGloo.*timeout", re.I)


@dataclass
class Diagnosis:
    kind: str
    summary: str
    culprit_ranks: list[int] = field(default_factory=list)
    op: str | None = None
    group: list[int] | None = None
    seq: int | None = None
    site: str | None = None
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "summary": self.summary, "culprit_ranks": self.culprit_ranks, "op": self.op,
                "group": self.group, "seq": self.seq, "site": self.site, "details": self.details}


class RankTrack:
    """One rank's state, built incrementally from its trace events."""

    def __init__(self, rank: int):
        self.rank = rank
        self.events: list[dict] = []
        self.open: dict[int, dict] = {}      # call id -> enter event, for calls that have not returned
        self.posted: dict[int, dict] = {}    # async ops started but not yet waited on
        self.hello: dict | None = None
        self.end: dict | None = None
        self.inits: list[dict] = []
        self.new_groups: list[dict] = []
        self.by_bucket: dict[tuple, dict] = {}  # (group name, seq) -> enter event of that collective
        self.failed_call: dict | None = None    # the distributed call that raised, if one did
        # filled in by the launcher (live) or left None (offline)
        self.pid: int | None = None
        self.exit_code: int | None = None
        self.exit_t: float | None = None
        self.stack: str | None = None
        self.outcome: str | None = None

    MAX_EVENTS = 200_000  # per rank: a long job keeps its most recent calls, not all of them

    def feed(self, ev: dict) -> None:
        self.events.append(ev)
        if len(self.events) > self.MAX_EVENTS:
            del self.events[:self.MAX_EVENTS // 2]
        kind = ev.get("ev")
        if kind == "enter":
            self.open[ev["id"]] = ev
            if ev["op"] == "init_process_group":
                self.inits.append(ev)
            elif ev["op"] == "new_group":
                self.new_groups.append(ev)
            elif ev["op"] in COLLECTIVE and "seq" in ev:
                self.by_bucket[(ev.get("gname"), ev["seq"])] = ev
                if isinstance(ev["seq"], int):
                    self.by_bucket.pop((ev.get("gname"), ev["seq"] - 4096), None)  # only recent calls matter
            elif ev["op"] == "wait":
                self.posted.pop(ev.get("of_id"), None)
                self.posted.pop((ev.get("of_id"), ev.get("of_idx")), None)
        elif kind == "exit" and ev.get("inflight"):
            start = self.open.get(ev.get("id"))  # returned to Python, still running on the GPU: still pending
            if start is not None:
                start["inflight"] = True
        elif kind == "done":
            start = self.open.pop(ev.get("id"), None)
            if start is not None:
                start["_exit"] = ev
        elif kind == "exit":
            start = self.open.pop(ev.get("id"), None)
            if start is not None:
                start["_exit"] = ev
                if ev.get("error"):
                    self.failed_call = start
                if start.get("async") and not ev.get("error") and start["op"] != "wait":
                    if start["op"] == "batch_isend_irecv":
                        for i, p in enumerate(start.get("p2p", [])):
                            self.posted[(start["id"], i)] = {**start, "op": p["op"], "peer": p["peer"]}
                    else:
                        self.posted[start["id"]] = start
        elif kind == "hello":
            self.hello = ev
        elif kind == "end":
            self.end = ev

    @property
    def pending(self) -> dict | None:
        """The distributed call this rank is inside now (the innermost one), or None."""
        if not self.open:
            return None
        return self.open[max(self.open)]

    @property
    def alive(self) -> bool:
        return self.exit_code is None and self.outcome in (None, "hung", "stopped")

    @property
    def finished(self) -> bool:
        """Done with its own code; a rank the sandbox ended (hung/stopped) is judged as it was when it was ended."""
        if self.outcome in ("hung", "stopped"):
            return False
        if self.pid is not None:  # a live run: the process may still run atexit handlers after its "end"
            return self.exit_code is not None
        return self.exit_code is not None or self.end is not None


# ----------------------------------------------------------------------------------------------- the hang rule

def _is_coll(p: dict) -> bool:
    return p["op"] in COLLECTIVE or (p["op"] == "wait" and p.get("of") in COLLECTIVE)


def _p2p_dir(p: dict) -> str | None:
    op = p.get("of") if p["op"] == "wait" else p["op"]
    return "send" if op in SENDS else "recv" if op in RECVS else None


def _offers(q: RankTrack, direction: str, to: int, tag: int = 0) -> bool:
    """Does rank q have a send (or recv) towards rank `to`, with this tag, in flight, blocking or posted?"""
    cands = list(q.posted.values())
    if q.pending is not None:
        cands.append(q.pending)
    for p in cands:
        if _p2p_dir(p) == direction and p.get("peer") in (to, None) and p.get("tag", 0) == tag:
            return True
    return False


_UNEVEN = {"all_to_all", "all_to_all_single", "gather", "scatter"}  # per-rank shapes may differ legitimately


def _call_key(p: dict) -> tuple:
    """What must be equal on every rank at one collective: group, sequence number, and its signature."""
    op = p.get("of") if p["op"] == "wait" else p["op"]
    sig = (op, p.get("root")) if op in _UNEVEN else p.get("sig")
    return p.get("gname"), p.get("seq"), sig, p.get("group")


def can_complete(p: dict, me: RankTrack, tracks: dict[int, RankTrack]) -> bool:
    """Could the pending call `p` of rank `me` finish given what every other rank is doing now?"""
    live = {r: t for r, t in tracks.items() if not t.finished}
    if p["op"] == "init_process_group":
        members = p.get("group") or []
        return all(r in live and live[r].pending is not None and live[r].pending["op"] == "init_process_group"
                   and live[r].pending.get("endpoint") == p.get("endpoint")
                   and live[r].pending.get("world_size") == p.get("world_size") for r in members)
    if p["op"] == "new_group":
        members = p["ranks"] if isinstance(p.get("ranks"), list) else list(tracks)
        if me.rank not in members:
            return True
        return all(r in live and live[r].pending is not None and live[r].pending["op"] == "new_group"
                   and live[r].pending.get("index") == p.get("index") and live[r].pending.get("ranks") == p.get("ranks")
                   for r in members)
    if _is_coll(p):
        members = p.get("group")
        if not members:
            return True
        key = _call_key(p)
        for r in members:
            q = tracks.get(r)
            if q is None:
                return False
            if q.pending is not None and _is_coll(q.pending) and _call_key(q.pending) == key:
                continue
            # a peer that already got through this very call did its part (a broadcast's root leaves early)
            done = q.by_bucket.get((p.get("gname"), p.get("seq")))
            if done is not None and "_exit" in done and not done["_exit"].get("error") and _call_key(done) == key:
                continue
            return False
        return True
    direction = _p2p_dir(p)
    if direction is not None:
        want = "recv" if direction == "send" else "send"
        peers = [p["peer"]] if p.get("peer") is not None else [r for r in live if r != me.rank]
        return any(r in live and _offers(live[r], want, me.rank, p.get("tag", 0)) for r in peers)
    return True  # batch_isend_irecv (posting only), destroy_process_group, anything unknown: not judged


def progress_possible(tracks: dict[int, RankTrack]) -> bool:
    live = [t for t in tracks.values() if not t.finished]
    if not live:
        return True
    for t in live:
        p = t.pending
        if p is None or can_complete(p, t, tracks):
            return True
    return False


# ----------------------------------------------------------------------------------------------- naming the cause

def _ranks(rs) -> str:
    rs = sorted(rs)
    if len(rs) == 1:
        return f"rank {rs[0]}"
    if len(rs) > 2 and rs == list(range(rs[0], rs[-1] + 1)):
        return f"ranks {rs[0]}-{rs[-1]}"
    return "ranks " + ", ".join(map(str, rs[:-1])) + " and " + str(rs[-1])


def _call(p: dict) -> str:
    op = p["op"] if p["op"] != "wait" else f"wait on {p.get('of')}"
    bits = [op]
    if p.get("seq") and (_is_coll(p)):
        bits.append(f"#{p['seq']}")
    if p.get("group") and _is_coll(p):
        bits.append(f"of group {p['group']}")
    if p.get("peer") is not None and _p2p_dir(p):
        bits.append(("to" if _p2p_dir(p) == "send" else "from") + f" rank {p['peer']}")
    if p.get("shapes") and _is_coll(p):
        bits.append(f"shape {p['shapes'][0] if len(p['shapes']) == 1 else p['shapes']}")
    if p.get("dtypes") and _is_coll(p):
        bits.append(p["dtypes"][0])
    return " ".join(bits)


def _sig(p: dict) -> str:
    """op(shape, dtype, root) without the group and sequence number: for comparing ranks at one call."""
    op = p.get("of") if p["op"] == "wait" else p["op"]
    bits = []
    if p.get("shapes"):
        bits.append("shape " + str(p["shapes"][0] if len(p["shapes"]) == 1 else p["shapes"]))
    if p.get("dtypes"):
        bits.append(p["dtypes"][0])
    if p.get("root") is not None:
        bits.append(f"root {p['root']}")
    return f"{op}({', '.join(bits)})"


def short(msg: str) -> str:
    """An error's first line, without gloo's source path prefix and boilerplate."""
    line = _first_line(msg)
    line = re.sub(r"^\[[^\]]*(third_party|/gloo/)[^\]]*\]\s*", "", line)
    line = re.sub(r"\s*This is typically caused by.*$", "", line)
    return line.rstrip(". ")


def _stack_top(stack: str | None) -> str | None:
    """file:line (function) of the innermost frame of a faulthandler dump that is not torch or the sandbox."""
    if not stack:
        return None
    # faulthandler prints the most recent call first, the current thread first
    for line in stack.splitlines():
        m = re.match(r'\s+File "(.+)", line (\d+) in (\S+)', line)
        if m and "/torch/" not in m.group(1) and "/sandbox/" not in m.group(1) and "/python3" not in m.group(1) \
                and not m.group(1).startswith("<"):
            path = m.group(1)
            try:
                rel = os.path.relpath(path)
                path = rel if not rel.startswith("..") else path
            except ValueError:
                pass
            return f"{path}:{m.group(2)} (in {m.group(3)})"
    return None


def where(t: RankTrack) -> str:
    """A few words on where a rank is now."""
    if t.pending is not None:
        return f"in {_call(t.pending)} at {t.pending.get('site')}"
    if (t.exit_code is not None or t.end is not None) and t.outcome not in ("hung", "stopped"):
        code = t.exit_code if t.exit_code is not None else t.end.get("exit_code")
        if t.end is not None and t.end.get("outcome") == "error":
            return f"already failed ({t.end['error']['type']} at {t.end['error'].get('site')})"
        if code == 0:
            return "already finished (exit 0)"
        return f"already gone ({_exit_words(code)})"
    top = _stack_top(t.stack)
    return f"busy in its own code at {top}" if top else "busy in its own code"


def _exit_words(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


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
                launcher = f"{p.get('MASTER_ADDR') if p.get('MASTER_ADDR') not in ('localhost',) else '127.0.0.1'}:{p['MASTER_PORT']}"
    culprits = [r for (ep, _), rs in seen.items() if ep != launcher for r in rs] if launcher else []
    if not culprits or len(culprits) == sum(len(v) for v in seen.values()):
        culprits = _minority(seen)
    parts = [f"{_ranks(rs)} at {ep} (world size {ws}, {tracks[rs[0]].inits[-1].get('init_method')})"
             for (ep, ws), rs in seen.items()]
    p = tracks[culprits[0]].inits[-1]
    return Diagnosis("init_mismatch",
                     "The ranks disagree on the rendezvous, so they can never meet: " + "; ".join(parts) +
                     (f". The launcher's endpoint is {launcher} (MASTER_ADDR:MASTER_PORT);"
                      f" {_ranks(culprits)} {'uses' if len(culprits) == 1 else 'use'} another"
                      f" ({p.get('init_method')} at {p.get('site')})." if launcher else "."),
                     culprits, "init_process_group", None, 0, p.get("site"),
                     {"endpoints": {f"{ep} ws={ws}": rs for (ep, ws), rs in seen.items()}, "launcher": launcher})


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
            (f"{_ranks(rs)} created {list(g)}" if g is not None else f"{_ranks(rs)} never made this call")
            for g, rs in camps.items())
        site = next((tracks[r].new_groups[k].get("site") for r in culprits if k < len(tracks[r].new_groups)), None)
        return Diagnosis("group_mismatch",
                         f"The ranks created process groups differently at their new_group call #{k + 1}: {describe}."
                         " Every rank must call every new_group, with the same ranks, in the same order"
                         " (group names come from that order), so these groups never connect.",
                         culprits, "new_group", None, k + 1, site, {"index": k + 1, "camps": {str(g): rs for g, rs in camps.items()}})
    return None


def _bucket_mismatch(tracks, pend: dict[int, dict]) -> Diagnosis | None:
    """Ranks at the same call of the same group, calling different things."""
    buckets: dict = {}
    for r, p in pend.items():
        if _is_coll(p):
            buckets.setdefault((p.get("gname"), p.get("seq")), {})[r] = p
    # also ranks that already passed this call (a crash ends one side early): use their recorded event
    for key, members in buckets.items():
        for r, t in tracks.items():
            if r not in members and key in t.by_bucket and t.by_bucket[key].get("group") == next(iter(members.values())).get("group"):
                members[r] = t.by_bucket[key]
    for (gname, seq), members in sorted(buckets.items(), key=lambda kv: min(p["t"] for p in kv[1].values())):
        groups = {tuple(p.get("group") or ()) for p in members.values()}
        if len(groups) > 1:
            continue  # different memberships: a group mismatch, named elsewhere
        camps: dict = {}
        for r, p in members.items():
            op = p.get("of") if p["op"] == "wait" else p["op"]
            sig = (op, p.get("root"), "" if op in _UNEVEN else str(p.get("shapes")), str(p.get("dtypes")))
            camps.setdefault(sig, []).append(r)
        if len(camps) < 2:
            continue
        culprits = _minority(camps)
        ex = members[culprits[0]]
        parts = [f"{_ranks(rs)} {'calls' if len(rs) == 1 else 'call'} {_sig(members[rs[0]])} at {members[rs[0]].get('site')}"
                 for rs in sorted(camps.values(), key=len, reverse=True)]
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
        return Diagnosis("collective_mismatch",
                         f"Collective mismatch at call #{seq} of group {ex.get('group')}: " + "; ".join(parts) +
                         f". The {'/'.join(what) or 'call'} must be the same on every rank of the group.",
                         culprits, ex.get("of") if ex["op"] == "wait" else ex["op"], ex.get("group"), seq,
                         ex.get("site"), {"calls": {str(r): _call(p) for r, p in sorted(members.items())},
                                          "differs_in": what})
    return None


def _p2p(tracks, pend) -> Diagnosis | None:
    waits = {r: p for r, p in pend.items() if _p2p_dir(p) and p.get("peer") is not None}
    for start in sorted(waits):
        path, r = [], start
        while r in waits and r not in path:
            path.append(r)
            r = waits[r]["peer"]
        if r in path:
            cycle = path[path.index(r):]
            kinds = {_p2p_dir(waits[c]) for c in cycle}
            tags = {waits[c].get("tag", 0) for c in cycle}
            steps = "; ".join(f"rank {c} blocks in {_call(waits[c])}"
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
            return Diagnosis("p2p_cycle", f"Point-to-point cycle: {steps}. {why[0].upper() + why[1:]}.{advice}",
                             sorted(cycle), waits[cycle[0]].get("of") or waits[cycle[0]]["op"], None, None,
                             waits[cycle[0]].get("site"), {"cycle": cycle})
    for r, p in sorted(waits.items()):
        q = tracks.get(p["peer"])
        if q is not None:
            return Diagnosis("missing_ranks",
                             f"Rank {r} waits in {_call(p)} at {p.get('site')}, but rank {q.rank} is {where(q)}.",
                             [q.rank], p.get("of") or p["op"], None, None, p.get("site"),
                             {"waiting": [r], "elsewhere": {str(q.rank): where(q)}})
    return None


def _missing(tracks, pend) -> Diagnosis | None:
    for r, p in sorted(pend.items(), key=lambda kv: kv[1]["t"]):
        members = p.get("group") if (_is_coll(p) or p["op"] == "init_process_group") else (
            p.get("ranks") if p["op"] == "new_group" and isinstance(p.get("ranks"), list) else None)
        if not members:
            continue
        op = p.get("of") if p["op"] == "wait" else p["op"]
        same = [m for m in members if m in pend and (pend[m].get("of") if pend[m]["op"] == "wait" else pend[m]["op"]) == op
                and pend[m].get("seq") == p.get("seq") and pend[m].get("gname") == p.get("gname")]
        absent = [m for m in members if m not in same]
        if not absent:
            continue
        elsewhere = {str(m): where(tracks[m]) if m in tracks else "never started" for m in absent}
        detail = "; ".join(f"rank {m} is {w}" for m, w in elsewhere.items())
        return Diagnosis("missing_ranks",
                         f"{_ranks(same)} {'waits' if len(same) == 1 else 'wait'} in {_call(p)} at {p.get('site')},"
                         f" but {_ranks(absent)} never {'arrives' if len(absent) == 1 else 'arrive'}: {detail}.",
                         absent, p.get("of") if p["op"] == "wait" else p["op"], members, p.get("seq"), p.get("site"),
                         {"waiting": same, "elsewhere": elsewhere})
    return None


def diagnose_hang(tracks: dict[int, RankTrack]) -> Diagnosis:
    pend = {r: t.pending for r, t in tracks.items() if t.pending is not None}
    for finder in (lambda: _init_mismatch(tracks), lambda: _group_mismatch(tracks, strict=True),
                   lambda: _bucket_mismatch(tracks, pend), lambda: _p2p(tracks, pend), lambda: _missing(tracks, pend)):
        d = finder()
        if d is not None:
            return d
    parts = "; ".join(f"rank {r} {where(t)}" for r, t in sorted(tracks.items()))
    return Diagnosis("none", f"Every rank is blocked and none can finish, but the pattern is not one the sandbox"
                             f" names: {parts}.", [], None, None, None, None, {})


def _error_of(t: RankTrack) -> dict | None:
    if t.end is not None and t.end.get("outcome") == "error":
        return t.end["error"]
    return None


def diagnose_failure(tracks: dict[int, RankTrack]) -> Diagnosis:
    """A rank crashed or raised: name the first real cause, and what its peers saw."""
    crashed = [t for t in tracks.values() if t.outcome == "crashed"]
    errored = [t for t in tracks.values() if t.outcome == "error"]
    # where each rank was: the call it is inside, or the distributed call that raised
    pend = {r: t.pending or t.failed_call for r, t in tracks.items() if (t.pending or t.failed_call) is not None}
    # DETAIL mode names the mismatch itself
    for t in errored:
        e = _error_of(t)
        if e and "mismatch between collectives" in e.get("message", ""):
            d = _bucket_mismatch(tracks, pend)
            if d is not None:
                d.details["torch_says"] = e["message"][:600]
                return d
            return Diagnosis("collective_mismatch", f"PyTorch's own check found a collective mismatch on rank"
                             f" {t.rank}: {e['message'][:400]}", [t.rank], None, None, None, e.get("site"),
                             {"torch_says": e["message"][:600]})
    d = _group_mismatch(tracks, strict=True) if any(t.new_groups for t in tracks.values()) else None
    if d is not None:
        return d
    d = _bucket_mismatch(tracks, pend)
    if d is not None:
        d.summary += " " + _peer_words(tracks, d.culprit_ranks)
        return d

    def first(ts):
        return min(ts, key=lambda t: (t.exit_t or float("inf"), t.rank))

    if crashed:
        t = first(crashed)
        p = t.pending
        at = f" inside {_call(p)} at {p.get('site')}" if p else (
            f" after its last traced call" if t.events else "")
        peers = _peer_words(tracks, [t.rank])
        return Diagnosis("rank_crashed", f"Rank {t.rank} died ({_exit_words(t.exit_code)}){at}. {peers}".strip(),
                         [t.rank], p["op"] if p else None, p.get("group") if p else None,
                         p.get("seq") if p else None, p.get("site") if p else None,
                         {"exit_code": t.exit_code, "signal": signal.Signals(-t.exit_code).name
                          if t.exit_code is not None and t.exit_code < 0 and -t.exit_code in signal.Signals._value2member_map_ else None})
    causes = [t for t in errored if not _PEER_LOST.search((_error_of(t) or {}).get("message", ""))]
    if not causes and errored:
        # every error only says "a peer went away": the cause is a rank that was not in the call with them
        inside = {r: t.failed_call for r, t in tracks.items() if t.failed_call is not None}
        d = _missing(tracks, inside)
        if d is not None:
            d.summary += " " + _peer_words(tracks, d.culprit_ranks)
            return d
        causes = errored
    if causes:
        t = first(causes)
        e = _error_of(t)
        p = t.pending
        inside = f" inside {_call(p)}" if p else ""
        others = [o for o in errored if o is not t]
        tail = (" " + _peer_words(tracks, [t.rank])) if others else ""
        return Diagnosis("rank_error", f"Rank {t.rank} raised {e['type']}: {short(e['message'])}{inside}"
                                       f"{' at ' + e['site'] if e.get('site') else ' before any of its own code ran'}.{tail}", [t.rank], p["op"] if p else None,
                         p.get("group") if p else None, p.get("seq") if p else None, e.get("site"),
                         {"error": {k: e[k] for k in ("type", "message", "site") if k in e}})
    return Diagnosis("none", "The run failed without a recorded cause.", [], None, None, None, None, {})


def _first_line(msg: str) -> str:
    lines = [line for line in msg.strip().splitlines() if line.strip()]
    s = lines[0] if lines else ""
    return s if len(s) <= 300 else s[:297] + "..."


def _peer_words(tracks, culprits) -> str:
    """What the other ranks saw, with ranks that saw the same thing named together."""
    saw: dict[str, list[int]] = {}
    for r, t in sorted(tracks.items()):
        if r in culprits:
            continue
        e = _error_of(t)
        if e:
            what = f"got {e['type']}: {short(e['message'])[:200]}"
        elif t.outcome in ("hung", "stopped") and t.pending is not None:
            what = f"left waiting in {_call(t.pending)}"
        else:
            continue
        saw.setdefault(what, []).append(r)
    parts = [f"{_ranks(rs)} {'was' if len(rs) == 1 else 'were'} {what}" if what.startswith("left") else f"{_ranks(rs)} {what}"
             for what, rs in saw.items()]
    return ("Its peers saw: " + "; ".join(parts) + ".") if parts else ""


def diagnose_timeout(tracks: dict[int, RankTrack], timeout: float) -> Diagnosis:
    busy = [t for t in tracks.values() if not t.finished and t.pending is None]
    waiting = [t for t in tracks.values() if not t.finished and t.pending is not None]
    if busy and waiting:
        b = busy[0]
        w = waiting[0]
        return Diagnosis("straggler",
                         f"Not a deadlock: {_ranks([t.rank for t in busy])} {'was' if len(busy) == 1 else 'were'}"
                         f" {where(b)} when the {timeout:g} s timeout passed, while {_ranks([t.rank for t in waiting])}"
                         f" waited in {_call(w.pending)} at {w.pending.get('site')}.",
                         [t.rank for t in busy], w.pending["op"], w.pending.get("group"), w.pending.get("seq"),
                         w.pending.get("site"), {"busy": {str(t.rank): where(t) for t in busy}})
    if waiting:
        d = diagnose_hang(tracks)
        d.summary = f"The {timeout:g} s timeout passed with every rank inside a distributed call: " + d.summary
        return d
    return Diagnosis("none", f"The run did not finish within {timeout:g} s; no rank was waiting on another"
                             f" ({'; '.join(f'rank {t.rank} {where(t)}' for t in busy)}).",
                     [], None, None, None, None, {})


# ----------------------------------------------------------------------------------------------- offline: a trace dir

def _valid(line: str) -> dict | None:
    """One trace line as an event, or None if it is not one the tracer could have written."""
    try:
        ev = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(ev, dict) or not isinstance(ev.get("ev"), str) or not isinstance(ev.get("t", 0), (int, float)):
        return None
    if ev["ev"] in ("enter", "exit", "done") and not isinstance(ev.get("id"), int):
        return None
    if ev["ev"] == "enter" and (not isinstance(ev.get("op"), str) or "t" not in ev):
        return None
    return ev


def load_dir(path: str) -> dict[int, RankTrack]:
    tracks: dict[int, RankTrack] = {}
    for name in sorted(os.listdir(path)):
        m = re.fullmatch(r"rank-(\d+)\.jsonl", name)
        if not m:
            continue
        t = RankTrack(int(m.group(1)))
        try:
            with open(os.path.join(path, name), errors="replace") as f:
                for line in f:
                    ev = _valid(line)
                    if ev is not None:  # a torn last line of a killed rank, or junk, is skipped
                        t.feed(ev)
        except OSError:
            continue
        stack = os.path.join(path, f"stack-{t.rank}.txt")
        if os.path.isfile(stack):
            try:
                with open(stack, errors="replace") as f:
                    t.stack = f.read() or None
            except OSError:
                pass
        tracks[t.rank] = t
    return tracks


def judge_offline(tracks: dict[int, RankTrack]) -> tuple[str, Diagnosis, dict[int, str]]:
    """Verdict, diagnosis and per-rank outcome from trace files alone (no exit codes: the launcher was torchrun)."""
    outcomes = {}
    for r, t in tracks.items():
        if t.end is not None:
            o = t.end.get("outcome")
            outcomes[r] = "ok" if o == "ok" else "error" if o == "error" else "crashed"
            if o == "exit":
                t.exit_code = t.end.get("exit_code")
        elif t.pending is not None:
            outcomes[r] = "hung"
        else:
            outcomes[r] = "crashed"  # no end record and not inside a call: killed or died in its own code
        t.outcome = outcomes[r]
    ws = max([t.hello.get("world_size", 0) for t in tracks.values() if t.hello] + [len(tracks)])
    for r in range(ws):
        if r not in tracks:
            tracks[r] = RankTrack(r)
            tracks[r].outcome = outcomes[r] = "crashed"
    vals = set(outcomes.values())
    if vals == {"ok"}:
        return "ok", Diagnosis("none", f"All {len(tracks)} ranks finished.", []), outcomes
    if "error" in vals or ("crashed" in vals and "hung" not in vals):
        return ("crash" if "crashed" in vals else "error"), diagnose_failure(tracks), outcomes
    # ranks still inside calls when the job was ended: judge their pending calls as a hang
    hung = {r: t for r, t in tracks.items() if outcomes[r] == "hung"}
    if hung and not progress_possible({r: t for r, t in tracks.items() if outcomes[r] in ("hung", "ok")}):
        return "hang", diagnose_hang(tracks), outcomes
    if "crashed" in vals:
        return "crash", diagnose_failure(tracks), outcomes
    return "hang", diagnose_hang(tracks), outcomes


def main(argv=None) -> int:
    import argparse

    from sandbox import report
    from sandbox.result import RankResult, RunResult

    p = argparse.ArgumentParser(prog="python -m sandbox.diagnose",
                                description="Diagnose a run from the per-rank trace files written by sandbox.trace.")
    p.add_argument("trace_dir")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    a = p.parse_args(argv)
    if not os.path.isdir(a.trace_dir):
        print(f"sandbox.diagnose: {a.trace_dir} is not a directory.", file=sys.stderr)
        return 2
    tracks = load_dir(a.trace_dir)
    if not tracks:
        print(f"sandbox.diagnose: {a.trace_dir} holds no rank-<N>.jsonl trace files.", file=sys.stderr)
        return 2
    verdict, diag, outcomes = judge_offline(tracks)
    ranks = [RankResult.from_track(t, outcomes[r]) for r, t in sorted(tracks.items())]
    res = RunResult(verdict=verdict, world_size=len(tracks), wall_s=None, diagnosis=diag, ranks=ranks,
                    events=[e for t in tracks.values() for e in t.events])
    if a.json:
        print(json.dumps(res.to_dict(), indent=2))
    else:
        report.print_result(res)
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
