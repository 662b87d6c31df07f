"""Contracts checked over the traces of a run that is over, whatever its verdict: a run that finished can still be
wrong. gloo may pair two calls the contract says must be equal (an all_reduce with an all_gather of the same size),
a race may have gone the lucky way, or NCCL may have moved the wrong bytes without a word. Each breach is a
`ContractWarning`: the ranks, the call (op, group, sequence number), the call sites, one sentence, and the rule.

No torch here: live runs (`sandbox.launcher`) and trace directories (`python -m sandbox.diagnose DIR`) are checked
by the same code. Only calls that returned are judged, so a run that hung or crashed is not warned about what its
failure already explains; what its finished calls broke is still said.
"""
from __future__ import annotations

import bisect
import re
from collections import Counter
from dataclasses import asdict, dataclass, field, replace

from sandbox import branches
from sandbox.events import COLLECTIVES, RECVS, SENDS, UNEVEN, RankTrack, op_of
from sandbox.words import plural, ranks as ranks_words, signature

RULES = {
    "collective_differs": "Every rank of a group must make the same collective at the same point, with the same "
                          "op, shapes, dtypes, root and reduce op: gloo may still pair unlike calls of one size, and "
                          "NCCL checks nothing, so the data is silently wrong.",
    "group_mismatch": "Every rank must call every new_group (unless use_local_synchronization=True), with the same "
                      "ranks, in the same order: groups are named by that order.",
    "p2p_unmatched": "Every send needs a matching recv on its peer (same tag); an unmatched one hangs on gloo and on "
                     "NCCL as soon as the timing changes.",
    "send_cycle": "With blocking send/recv, the matching recv must be reachable on the peer before a send: two ranks "
                  "that send to each other first deadlock on gloo at any size, and on NCCL once the messages outgrow "
                  "its buffers or the pair's connection is new. Post both sides first (isend/irecv, "
                  "batch_isend_irecv), or order them by rank.",
    "async_unwaited": "The Work of an isend, irecv or async_op=True call must be waited on before its tensor is "
                      "used, the group destroyed or the process left.",
    "call_count": "Every rank of a group must make the same number of collectives on it; a rank with extra calls "
                  "waits for partners that are gone.",
    "object_device": "A tensor inside an object (all_gather_object, gather_object, broadcast_object_list, "
                     "scatter_object_list) comes back on the device it was sent from: send it from the CPU, or "
                     "move it (.to(device)) before using it with this rank's tensors.",
    "not_destroyed": "Call dist.destroy_process_group() before the process exits (PyTorch warns about it from 2.4 "
                     "on; NCCL may hang or leak at exit without it).",
}


@dataclass
class ContractWarning:
    kind: str
    summary: str
    ranks: list[int]
    op: str | None = None
    group: list[int] | None = None
    seq: int | None = None
    sites: dict[int, str] = field(default_factory=dict)
    details: dict = field(default_factory=dict)  # the facts behind the sentence, per kind (not stable)

    @property
    def rule(self) -> str:
        return RULES[self.kind]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["sites"] = {str(r): s for r, s in self.sites.items()}
        d["rule"] = self.rule
        return d


# ------------------------------------------------------------------------------------------------ reading calls

def _completed(t: RankTrack) -> dict[tuple, dict]:
    """(group name, sequence number) -> the enter event, for this rank's collectives that returned without an error
    (an NCCL one: finished on the GPU); the last BUCKET_WINDOW of each group."""
    return {k: t.by_bucket[k] for k, ok in t.passed.items() if ok and k in t.by_bucket}


def _ended_ok(t: RankTrack | None) -> bool:
    return t is not None and t.end is not None and t.end.get("outcome") == "ok"


def _where(p: dict) -> str:
    return p.get("site") or "?"


def check(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    """Every contract breach the traces show, in a stable order."""
    tracks = dict(sorted(tracks.items()))
    done = {r: _completed(t) for r, t in tracks.items()}
    return (_collectives_differ(done) + _groups_differ(tracks) + _p2p_unmatched(tracks) + _send_cycles(tracks)
            + _async_unwaited(tracks) + _call_counts(tracks) + _object_devices(tracks) + _not_destroyed(tracks))


# ------------------------------------------------------------------------------------------------ the rules

def _fingerprint(p: dict) -> tuple:
    """What must be equal on every rank at one call of a group (shapes may differ in the uneven ops)."""
    op = op_of(p)
    return op, p.get("root"), None if op in UNEVEN else repr(p.get("shapes")), repr(p.get("dtypes")), p.get("redop")


def _said(p: dict) -> str:
    s = signature(p)
    return s[:-1] + f", {p['redop']})" if p.get("redop") and s.endswith(")") else s


def _branch(p: dict) -> str:
    """' (through `if rank == 0:` at x.py:5)' when the call's own site sits under a rank-dependent if."""
    b = branches.rank_branch(branches.site_frame(p.get("site")))
    return f" ({branches.through(b)})" if b else ""


def _by_variant(members: dict[int, dict]) -> list[tuple[list[int], dict]]:
    groups: dict[tuple, list[int]] = {}
    for r, p in sorted(members.items()):
        groups.setdefault(_fingerprint(p), []).append(r)
    return [(rs, members[rs[0]]) for rs in groups.values()]


def _collectives_differ(done: dict[int, dict[tuple, dict]]) -> list[ContractWarning]:
    """The first call of each group that differed across ranks, and how many later ones did too (a loop repeats
    one mistake: one warning says it)."""
    buckets: dict[tuple, dict[int, dict]] = {}
    for r, calls in done.items():
        for key, p in calls.items():
            buckets.setdefault(key, {})[r] = p
    first: dict[str, ContractWarning] = {}
    for (gname, seq), members in sorted(buckets.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        variants = _by_variant(members)
        if len(variants) < 2:
            continue
        if gname in first:
            first[gname].details["later"] = first[gname].details.get("later", 0) + 1
            continue
        group = next(iter(members.values())).get("group")
        said = "; ".join(f"{ranks_words(rs)} called {_said(p)} at {_where(p)}{_branch(p)}" for rs, p in variants)
        first[gname] = ContractWarning(
            "collective_differs", f"Call #{seq} of group {group} completed but was not the same call on every "
                                  f"rank: {said}.",
            sorted(members), op=op_of(variants[0][1]), group=group, seq=seq,
            sites={r: _where(p) for r, p in members.items()})
    for w in first.values():
        if w.details.get("later"):
            w.summary += f" {plural(w.details['later'], 'later call')} of this group differed too."
    return list(first.values())


def _groups_differ(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    """The first new_group call (counted per rank, those that returned) where the ranks disagree; later ones
    follow from it and are not repeated."""
    made = {r: [g for g in t.new_groups if not g.get("local_sync") and g["id"] not in t.open]
            for r, t in tracks.items()}
    for k in range(max((len(gs) for gs in made.values()), default=0)):
        at = {r: gs[k] for r, gs in made.items() if len(gs) > k}
        variants: dict[str, list[int]] = {}
        for r, g in sorted(at.items()):
            variants.setdefault(repr(g.get("ranks")), []).append(r)
        missing = [r for r in sorted(set(made) - set(at)) if _ended_ok(tracks[r])]
        sites = {r: _where(g) for r, g in at.items()}
        if len(variants) > 1:
            said = "; ".join(f"{ranks_words(rs)} created {at[rs[0]].get('ranks')} at {_where(at[rs[0]])}"
                             for rs in variants.values())
            return [ContractWarning(
                "group_mismatch", f"The ranks created process groups differently at their new_group call #{k + 1}: "
                                  f"{said}.", sorted(at), op="new_group", seq=k + 1, sites=sites)]
        if missing:
            g = next(iter(at.values()))
            return [ContractWarning(
                "group_mismatch", f"Only {ranks_words(sorted(at))} created group {g.get('ranks')} (new_group call "
                                  f"#{k + 1}, at {_where(g)}); {ranks_words(missing)} never did.",
                sorted(at) + missing, op="new_group", seq=k + 1, sites=sites)]
    return []


def _p2p_unmatched(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    sent: dict[tuple[int, int], Counter] = {}
    got: dict[tuple[int, int], Counter] = {}
    site: dict[tuple[str, int, int], str] = {}
    for r, t in tracks.items():
        for (direction, peer, tag), n in t.p2p_done.items():
            if peer is None:
                continue
            pair = (r, peer) if direction == "send" else (peer, r)
            (sent if direction == "send" else got).setdefault(pair, Counter())[tag] += n
            site.setdefault((direction, *pair), t.p2p_site.get((direction, peer)) or "?")
    out = []
    for pair in sorted(set(sent) | set(got)):
        s, g = sent.get(pair, Counter()), got.get(pair, Counter())
        src, dst = pair
        if s == g:
            continue
        where = {src: site.get(("send", *pair), "?"), dst: site.get(("recv", *pair), "?")}
        n, m = sum(s.values()), sum(g.values())
        if n == m:
            out.append(ContractWarning(
                "p2p_unmatched", f"Rank {src}'s sends to rank {dst} and rank {dst}'s receives from it do not agree "
                                 f"on tags: sent with tags {sorted(s.elements())} at {where[src]}, received with "
                                 f"tags {sorted(g.elements())} at {where[dst]}.", [src, dst], op="send", sites=where))
        elif n > m and _ended_ok(tracks.get(dst)):
            out.append(ContractWarning(
                "p2p_unmatched", f"Rank {src} sent {n} message{'s' if n > 1 else ''} to rank {dst} (at {where[src]}) "
                                 f"but rank {dst} received {m}: {n - m} never received.", [src, dst], op="send",
                sites={src: where[src]}))
        elif m > n and _ended_ok(tracks.get(src)):
            out.append(ContractWarning(
                "p2p_unmatched", f"Rank {dst} posted {m} receive{'s' if m > 1 else ''} from rank {src} (at "
                                 f"{where[dst]}) but rank {src} sent {n}: {m - n} never matched.", [src, dst],
                op="recv", sites={dst: where[dst]}))
    return out


def _send_cycles(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    """Two ranks that each made a blocking send to the other before posting the recv that the other's send needed,
    and both sends completed: the kv-sync pattern, finished only because the backend buffered the messages (NCCL
    does for small ones on a connected pair; gloo never does). Judged by the order each rank posted its calls in,
    not by when they finished: an NCCL call finishes on the GPU, long after the host has posted the next one."""
    out = []
    for a, ta in sorted(tracks.items()):
        for b, tb in sorted(tracks.items()):
            hit = _send_cycle(ta, tb, a, b) if b > a else None
            if hit:
                sa, sb = hit
                out.append(ContractWarning(
                    "send_cycle", f"Ranks {a} and {b} each sent to the other before receiving (rank {a} at {sa}, "
                                  f"rank {b} at {sb}), both in blocking sends at once; it completed only because the "
                                  "backend buffered the messages.", [a, b], op="send", sites={a: sa, b: sb}))
    return out


def _send_cycle(ta: RankTrack, tb: RankTrack, a: int, b: int) -> tuple[str, str] | None:
    """(site of a's send, site of b's send) when a's blocking send #k to b came before a posted its recv #m from
    b, and b's blocking send #m to a came before b posted its recv #k from a: with sends that wait for their recv,
    each would wait for the other. None otherwise."""
    def sides(t, peer):
        sends = {(tag, n): (at, site) for d, p, tag, n, at, blocking, site in t.p2p_posted
                 if d == "send" and p == peer and blocking and t.p2p_done.get(("send", peer, tag), 0) >= n}
        recvs: dict[int, tuple[list[float], list[int]]] = {}  # tag -> (posted at, number), in the order posted
        for d, p, tag, n, at, _, _ in t.p2p_posted:
            if d == "recv" and p == peer:
                times, numbers = recvs.setdefault(tag, ([], []))
                times.append(at)
                numbers.append(n)
        return sends, recvs

    sends_a, recvs_a = sides(ta, b)
    sends_b, recvs_b = sides(tb, a)
    got_by_b = {(tag, n): at for tag, (times, numbers) in recvs_b.items() for n, at in zip(numbers, times)}
    for (tag, k), (sent_at, site_a) in sorted(sends_a.items(), key=lambda kv: kv[1][0]):
        b_recv_k = got_by_b.get((tag, k))
        if b_recv_k is None:
            continue
        for tag2, (times, numbers) in recvs_a.items():
            # the first recv from b that a posted after this send: later ones match later sends of b, sent later
            i = bisect.bisect_right(times, sent_at)
            hit = sends_b.get((tag2, numbers[i])) if i < len(numbers) else None
            if hit is not None and hit[0] < b_recv_k:
                return site_a or "?", hit[1] or "?"
    return None


def _async_unwaited(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    out = []
    for r, t in sorted(tracks.items()):
        if t.end is None:
            continue
        for p in sorted(t.posted.values(), key=lambda p: p["id"]):
            target = f" to rank {p['peer']}" if p["op"] in SENDS and p.get("peer") is not None else (
                f" from rank {p['peer']}" if p["op"] in RECVS and p.get("peer") is not None else "")
            out.append(ContractWarning(
                "async_unwaited", f"Rank {r}'s {p['op']}{target} at {_where(p)} was never waited on: the rank left "
                                  "with the request still pending.",
                [r], op=p["op"], group=p.get("group"), seq=p.get("seq"), sites={r: _where(p)},
                details={"peer": p.get("peer")} if p.get("peer") is not None else {}))
    return out


def _call_counts(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    """Counted by calls made (entered), so an extra asynchronous call a rank never waited on counts too."""
    per_group: dict[str, dict[int, dict[int, dict]]] = {}
    members: dict[str, list[int]] = {}
    for r, t in tracks.items():
        for (gname, seq), p in t.by_bucket.items():
            if gname is not None and isinstance(seq, int) and p["op"] in COLLECTIVES:
                per_group.setdefault(gname, {}).setdefault(r, {})[seq] = p
                members.setdefault(gname, p.get("group") or [])
    out = []
    for gname, by_rank in sorted(per_group.items(), key=lambda kv: str(kv[0])):
        group = members[gname]
        if not all(r in tracks and _ended_ok(tracks[r]) for r in group):
            continue
        counts = {r: max(by_rank.get(r, {0: None})) for r in group}
        if len(set(counts.values())) < 2:
            continue
        most = max(counts.values())
        short = sorted(r for r, c in counts.items() if c < most)
        long_ = sorted(r for r, c in counts.items() if c == most)
        extra = by_rank[long_[0]].get(min(counts[r] for r in short) + 1)
        if extra is None:  # older than the window kept
            continue
        out.append(ContractWarning(
            "call_count", f"The ranks left group {group} with different numbers of collectives: "
                          + "; ".join(f"{ranks_words([r])} made {counts[r]}" for r in group)
                          + f". The first call {ranks_words(short)} never made is {_said(extra)} at {_where(extra)}"
                          + f"{_branch(extra)}.",
            group, op=op_of(extra), group=group, seq=extra.get("seq"), sites={r: _where(extra) for r in long_}))
    return out


def _object_devices(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    """Per object collective (by its site): ranks handed tensors on devices other than those they sent from."""
    by_call: dict[tuple, dict[int, tuple]] = {}
    for r, t in tracks.items():
        for rec in t.object_devices:
            own = set(rec["sent"])
            foreign = {int(src): sorted(set(devs) - own) for src, devs in rec["got"].items()
                       if src.lstrip("-").isdigit() and int(src) != r and set(devs) - own}
            if own and foreign:
                call = rec["call"]
                by_call.setdefault((call["op"], _where(call)), {})[r] = (call, foreign, sorted(own))
    out = []
    for (op, site), per_rank in sorted(by_call.items()):
        r, (call, foreign, own) = min(per_rank.items())
        devices = sorted({d for ds in foreign.values() for d in ds})
        more = sorted(set(per_rank) - {r})
        out.append(ContractWarning(
            "object_device", f"{op} at {site} handed rank {r} tensors on {', '.join(devices)} (from "
                             f"{ranks_words(sorted(foreign))}), while its own are on {', '.join(own)}"
                             + (f"; likewise {ranks_words(more)}" if more else "") + ".",
            sorted(per_rank), op=op, group=call.get("group"), seq=call.get("seq"),
            sites={q: site for q in per_rank},
            details={"foreign": {str(q): sorted({d for ds in f.values() for d in ds})
                                 for q, (_, f, _) in per_rank.items()}}))
    return out


def explain(diagnosis, warnings: list[ContractWarning], tracks: dict[int, RankTrack]):
    """A failed run whose failure a warning explains: the diagnosis saying so (a note, and details["contract"]).
    Today: a device-mismatch error on a rank that an object collective handed tensors from other devices, and a
    receiver whose connection closed because the sender left with its isend never waited on."""
    for w in warnings:
        words = (_explain_device(w, diagnosis, tracks) if w.kind == "object_device" else
                 _explain_left_send(w, tracks) if w.kind == "async_unwaited" else None)
        if words:
            return replace(diagnosis.noted(words), details={**diagnosis.details, "contract": w.kind})
    return diagnosis


def _explain_device(w: ContractWarning, diagnosis, tracks) -> str | None:
    first = [q for q in diagnosis.culprit_ranks if q in w.ranks]
    for r in first + [q for q in w.ranks if q not in first]:
        err = tracks[r].error if r in tracks else None
        if err and "same device" in (err.get("message") or ""):
            devices = w.details.get("foreign", {}).get(str(r), [])
            return (f"Rank {r}'s failing call at {err.get('site') or '?'} got tensors that {w.op} at {w.sites.get(r)} "
                    f"delivered from {', '.join(devices)} (a tensor inside an object comes back on the device it was "
                    "sent from).")
    return None


_CLOSED = re.compile(r"Connection (reset|closed) by peer")


def _explain_left_send(w: ContractWarning, tracks) -> str | None:
    peer, [sender] = w.details.get("peer"), w.ranks
    err = tracks[peer].error if w.op in SENDS and peer in tracks else None
    if err and _CLOSED.search(err.get("message") or ""):
        return (f"Rank {sender}'s {w.op} to rank {peer} at {w.sites.get(sender)} was never waited on: rank {sender} "
                f"left with it still pending, which closed the connection rank {peer} was receiving on.")
    return None


def _not_destroyed(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    left = [(r, t.inits[-1]) for r, t in tracks.items() if t.inits and not t.destroyed and _ended_ok(t)]
    if not left:
        return []
    rs = [r for r, _ in left]
    return [ContractWarning(
        "not_destroyed", f"{ranks_words(rs).capitalize()} exited without destroying the default process group "
                         f"(initialised at {_where(left[0][1])}).", rs, op="destroy_process_group",
        sites={r: _where(p) for r, p in left})]
