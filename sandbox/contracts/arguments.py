"""What a call's arguments mean to torch, against what the program seems to have meant by them: a group the rank is
not a member of, a root named as a global rank where it is not in the group (or as a rank within the group where
that names another process), and a recv without `src`, which takes whichever message comes first.

`group_member` and `any_source` are breaches whatever the run came to (torch itself warns of the first: "Running
all_reduce on global rank N which does not belong to the given group"; the second says which rank's message filled
which receive). The rest are legal calls that explain a failure: `explain_arguments` notes the first that applies in
a failed run's diagnosis (a recv without `src` still pending or failed there, `_any_source`), and names the ranks
that made the call as the ones to fix.
"""
from __future__ import annotations

import ast
import functools
import re
from dataclasses import replace

from sandbox.branches import parsed_source, site_frame
from sandbox.calls import OPS, RECVS, SENDS
from sandbox.contracts.base import ContractWarning, where
from sandbox.diagnose import spaces
from sandbox.events import RankTrack
from sandbox.result import Kind
from sandbox.words import ranks as ranks_words

# torch's words when src/dst, read as a global rank, is outside the group passed, or the caller itself
ROOT_MISREAD = re.compile(r"Global rank (\d+) is not part of group|"
                          r"(?:destination|source) rank should not be the same as the rank of the current process")
# the diagnoses a wrong argument may be the root of: a rank's own error or death, a hang, peers left waiting
_OPEN_KINDS = {Kind.RANK_ERROR, Kind.RANK_CRASHED, Kind.MISSING_RANKS, Kind.NONE}


def _calls(t: RankTrack):
    return (e for e in t.events if e.get("ev") == "enter")


def _left_out_by(t: RankTrack, call: dict) -> dict | None:
    """The last new_group call before `call` whose group this rank is not in: the one that returned it the
    non-member value (torch's GroupMember.NON_GROUP_MEMBER), as far as the trace shows."""
    out = None
    for g in t.new_groups:
        if g.get("id", 0) < call.get("id", 0) and isinstance(g.get("ranks"), list) and t.rank not in g["ranks"]:
            out = g
    return out


def group_member(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    """Each rank's calls on a group it is not a member of (one warning per rank and call site)."""
    out, seen = [], set()
    for r, t in sorted(tracks.items()):
        for p in _calls(t):
            if not p.get("non_member") or (r, p.get("site")) in seen:
                continue
            seen.add((r, p.get("site")))
            g = _left_out_by(t, p)
            came = (f": new_group returned it to rank {r} for group {g['ranks']} at {where(g)}, a group rank {r} is "
                    "not in" if g else "")
            out.append(ContractWarning(
                "group_member", f"Rank {r} called {p['op']} at {where(p)} with a group it is not a member of{came}. "
                                "torch only warns and returns: the call moves no data, and rank "
                                f"{r}'s tensors keep their own values.",
                [r], op=p["op"], sites={r: where(p)}, details={"group": g["ranks"] if g else None}))
    return out


@functools.lru_cache(maxsize=256)
def sender_read(site: str | None) -> bool:
    """Does the code at `site` keep what its `recv` returns, the sender's rank (`src = dist.recv(t)`,
    `got[dist.recv(t)] = t`)? A recv that is a statement of its own drops it; where the source cannot be read, it
    counts as dropped."""
    frames = site_frame(site)
    parsed = parsed_source(frames[0][0]) if frames else None
    if parsed is None:
        return False
    line, tree = frames[0][1], parsed[0]
    dropped = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    return any(isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or n.lineno) and id(n) not in dropped
               and (getattr(n.func, "attr", None) or getattr(n.func, "id", None)) == "recv" for n in ast.walk(tree))


def any_source(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    """Each rank whose receives without src took messages of one tag from more than one rank: which one filled
    which receive was the order of arrival. Where every tag came from one sender only, the tags chose the sender
    (a tag per stream), whatever the order; a `recv` whose code keeps the rank it returns (`sender_read`) knows
    whose message it got."""
    out = []
    for r, t in sorted(tracks.items()):
        unknown = [a for a in t.any_source if not (a["op"] == "recv" and sender_read(a.get("site")))]
        by_tag: dict[int, set] = {}
        for a in unknown:
            by_tag.setdefault(a.get("tag", 0), set()).add(a["from"])
        mixed = {tag for tag, came in by_tag.items() if len(came) > 1}
        if not mixed:
            continue
        blind = [a for a in unknown if a.get("tag", 0) in mixed]
        senders = sorted({a["from"] for a in blind})
        got = blind[:6]
        told = ", ".join(f"{a['op']} at {a['site']} from rank {a['from']}" for a in got)
        left = len(blind) - len(got)
        more = f" and {left} more" if left > 0 else ""
        out.append(ContractWarning(
            "any_source", f"Rank {r}'s receives without src took their messages from {ranks_words(senders)} in the "
                          f"order the messages arrived ({told}{more}). Unless the code reads the sender from what "
                          "recv returns (or from the irecv's Work), name it: src=...",
            [r], op=got[0]["op"], sites={r: got[0]["site"]}, details={"from": [a["from"] for a in got]}))
    return out


def rank_spaces(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    """Calls whose root or peer was made as a rank of one numbering and passed where torch reads the other (read
    from the source, `sandbox.diagnose.spaces`), where the two readings name different processes in this run: a
    global rank passed as group_src of the group [1, 3] (1 is that group's rank 0; group_src=1 is global rank 3),
    or a rank within the group passed as src. One warning per call site; its ranks are those whose call was read
    as another process."""
    hits: dict[str, list] = {}  # site -> [(rank, call, value, the argument's name)]
    for r, t in sorted(tracks.items()):
        for p in _calls(t):
            for o in p.get("p2p") or ():  # batch_isend_irecv: each P2POp's peer, a global rank, in its own group
                g, v = o.get("group"), o.get("peer")
                if isinstance(g, list) and isinstance(v, int) and v in g and v < len(g) and g[v] != v:
                    hits.setdefault(p.get("site") or "?", []).append((r, {**p, "op": "P2POp", "group": g}, v, "peer"))
            g, arg = p.get("group"), _root_arg(p.get("op", ""))
            if not isinstance(g, list) or p.get("op") not in OPS or OPS[p["op"]].root is None:
                continue
            v = p.get("group_root")
            if v is None:
                v = p.get("root") if "root" in p else p.get("peer")
            else:
                arg = "group_" + arg
            if isinstance(v, int) and v in g and v < len(g) and g[v] != v:
                hits.setdefault(p.get("site") or "?", []).append((r, p, v, arg))
    out = []
    for site, calls in hits.items():
        r, p, v, arg = calls[0]
        found = spaces.root_space(site, p["op"], arg)
        want = spaces.GROUP if arg.startswith("group_") else spaces.GLOBAL
        if found is None or found["space"] == want:
            continue
        ranks = sorted({c[0] for c in calls})
        g = p["group"]
        told = ("as `{how}` at {made} reads it" if found["compared"] else "from `{how}` at {made}").format(**found)
        if want == spaces.GROUP:
            read = (f"`{found['value']}` is a global rank ({told}), and torch reads "
                    f"{arg} as a rank within the group, so {arg}={v} named global rank {g[v]}, not global rank {v} "
                    f"(that group's rank {g.index(v)}). Pass {arg.removeprefix('group_')}={found['value']} (a global "
                    f"rank), or {arg}=dist.get_group_rank({found['group']}, {found['value']}).")
        else:
            read = (f"`{found['value']}` is a rank within the group ({told}), and "
                    f"torch reads {arg} as a global rank, so {arg}={v} named global rank {v} (that group's rank "
                    f"{g.index(v)}), not the group's rank {v} (global rank {g[v]}). Pass group_{arg}="
                    f"{found['value']}, or {arg}=dist.get_global_rank({found['group']}, {found['value']}).")
        out.append(ContractWarning(
            "group_rank", f"{ranks_words(ranks).capitalize()} passed {arg}={v} to {p['op']} at {found['at']}"
                          + (f" (given to batch_isend_irecv at {site})" if found["at"] != site else "")
                          + f" with group {g}: {read}", ranks, op=p["op"], sites={c[0]: site for c in calls},
            details={"group": g, "arg": arg, "value": v, "space": found["space"]}))
    return out


def explain_arguments(diagnosis, warnings: list[ContractWarning], tracks: dict[int, RankTrack]):
    """A failed or hung run that a call's arguments explain: the diagnosis with a note saying how torch read them,
    the ranks that made the call as culprits, and details["contract"]; None when no argument explains it."""
    if diagnosis.kind not in _OPEN_KINDS:
        return None
    breached = [w for w in warnings if w.kind in ("group_member", "any_source", "group_rank")]
    if breached:
        culprits = sorted({r for w in breached for r in w.ranks})
        return _noted(diagnosis, " ".join(w.summary for w in breached[:3]), culprits, breached[0].kind)
    for found in (_root_misread(tracks), _group_root_elsewhere(tracks), _any_source(tracks)):
        if found is not None:
            words, culprits, kind = found
            return _noted(diagnosis, words, culprits, kind)
    return None


def _noted(diagnosis, words: str, culprits: list[int], kind: str):
    return replace(diagnosis.noted(words), culprit_ranks=culprits, details={**diagnosis.details, "contract": kind})


def _root_misread(tracks: dict[int, RankTrack]):
    """Ranks whose call raised because its src/dst, read as a global rank, is not in the group passed with it, or
    is the rank itself: a rank within the group given where torch wants a global one."""
    said: dict[tuple, list[int]] = {}  # (op, arg, value, group, site, the rank itself) -> ranks
    for r, t in sorted(tracks.items()):
        call, err = t.failed_call, t.failed_with or ((t.error or {}).get("message"))
        m = ROOT_MISREAD.search(err or "")
        if call is None or m is None or not isinstance(call.get("group"), list):
            continue
        arg = _root_arg(call["op"])
        value = int(m.group(1)) if m.group(1) is not None else call.get("root", call.get("peer"))
        if isinstance(value, int):
            said.setdefault((call["op"], arg, value, tuple(call["group"]), where(call), m.group(1) is None), []).append(r)
    if not said:
        return None
    parts = []
    for (op, arg, value, group, site, itself), ranks in said.items():
        who = ranks_words(ranks).capitalize()
        read = "which is the calling rank itself" if itself else f"and global rank {value} is not in that group"
        member = (f"; the group's rank {value} is global rank {group[value]} (group_{arg}={value})"
                  if 0 <= value < len(group) else "")
        parts.append(f"{who} passed {arg}={value} to {op} at {site} with group {list(group)}: torch reads {arg} as a "
                     f"global rank, {read}{member}.")
    parts.append("To name a member by its rank within the group pass group_src or group_dst, or convert it with "
                 "dist.get_global_rank(group, i).")
    return " ".join(parts), sorted({r for ranks in said.values() for r in ranks}), "group_rank"


def _root_arg(op: str) -> str:
    """The name of an op's root argument as a global rank: "src" or "dst" (torch's names, `sandbox.calls.OPS`)."""
    spec = OPS.get(op)
    return spec.root if spec is not None and spec.root in ("src", "dst") else "src"


def _group_root_elsewhere(tracks: dict[int, RankTrack]):
    """Calls that named their root as a rank within the group (group_src, group_dst) with a number that is also a
    member's global rank, and not the same process: group_src=1 of group [1, 3] is global rank 3."""
    hits, first = set(), None
    for r, t in sorted(tracks.items()):
        for p in _calls(t):
            g, v = p.get("group"), p.get("group_root")
            if isinstance(v, int) and isinstance(g, list) and v in g and g[v] != v:
                hits.add(r)
                first = first or (r, p)
    if first is None:
        return None
    r, p = first
    g, v = p["group"], p["group_root"]
    arg = "group_" + _root_arg(p["op"])
    words = (f"{ranks_words(sorted(hits)).capitalize()} passed {arg}={v} to {p['op']} at {where(p)} with group {g}: "
             f"torch reads {arg} as a rank within the group, so it names global rank {g[v]}; global rank {v} is that "
             f"group's rank {g.index(v)}. If global rank {v} was meant, pass {arg.removeprefix('group_')}={v}.")
    return words, sorted(hits), "group_rank"


def _any_source(tracks: dict[int, RankTrack]):
    """A rank that failed or hung in a recv without src while several ranks were sending to it: the recv took
    whichever message came first."""
    for r, t in sorted(tracks.items()):
        call = t.pending or t.failed_call
        if call is None or call.get("op") not in RECVS or call.get("peer") is not None:
            continue
        senders = {}  # rank -> its first send to r
        for q, u in sorted(tracks.items()):
            for p in _calls(u):
                if q != r and p.get("op") in SENDS and p.get("peer") == r:
                    senders.setdefault(q, p)
        unlike = {q for q, p in senders.items() if p.get("shapes") != call.get("shapes")}
        if not senders or (len(senders) < 2 and not unlike):
            continue
        told = "; ".join(f"rank {q} at {where(p)}" + (f", shape {p['shapes'][0]}" if p.get("shapes") else "")
                         for q, p in sorted(senders.items()))
        buf = f" (a buffer of shape {call['shapes'][0]})" if call.get("shapes") else ""
        words = (f"Rank {r}'s {call['op']} at {where(call)}{buf} names no src, so it takes the first message from "
                 f"any rank; {ranks_words(sorted(senders))} sent to rank {r} ({told})"
                 + (", a message that does not fit that buffer" if unlike else "")
                 + ". Name the sender (src=...) for each receive.")
        return words, [r], "any_source"
    return None
