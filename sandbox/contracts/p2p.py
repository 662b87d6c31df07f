"""Contracts of point-to-point calls: every send meets its recv, blocking sends never wait on each other, every
asynchronous request is waited on, and an isend's tensor is not written before its wait."""
from __future__ import annotations

import bisect
from collections import Counter

from sandbox.calls import RECVS, SENDS
from sandbox.contracts.base import ContractWarning, ended_ok, where
from sandbox.events import RankTrack
from sandbox.words import ranks as ranks_words

def p2p_unmatched(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
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
        elif n > m and ended_ok(tracks.get(dst)):
            out.append(ContractWarning(
                "p2p_unmatched", f"Rank {src} sent {n} message{'s' if n > 1 else ''} to rank {dst} (at {where[src]}) "
                                 f"but rank {dst} received {m}: {n - m} never received.", [src, dst], op="send",
                sites={src: where[src]}))
        elif m > n and ended_ok(tracks.get(src)):
            out.append(ContractWarning(
                "p2p_unmatched", f"Rank {dst} posted {m} receive{'s' if m > 1 else ''} from rank {src} (at "
                                 f"{where[dst]}) but rank {src} sent {n}: {m - n} never matched.", [src, dst],
                op="recv", sites={dst: where[dst]}))
    return out


def send_cycles(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
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


def buffer_written(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    """Isends whose tensor the sending rank wrote in place before waiting on them (the tracer's `written` events):
    the receiver may have got the later value. One warning per rank and call site."""
    out = []
    for r, t in sorted(tracks.items()):
        seen: dict[str, list[dict]] = {}
        for ev in t.written:
            seen.setdefault(ev.get("site") or "?", []).append(ev)
        for site, evs in seen.items():
            peers = sorted({ev["peer"] for ev in evs if ev.get("peer") is not None})
            to = f" to {ranks_words(peers)}" if peers else ""
            times = f" ({len(evs)} times)" if len(evs) > 1 else ""
            out.append(ContractWarning(
                "buffer_written", f"Rank {r} wrote the tensor of its {evs[0].get('op', 'isend')}{to} at {site} before"
                                  f" waiting on it at {evs[0].get('wait_site')}{times}: the transfer reads the tensor"
                                  f" when it happens, so {ranks_words(peers) if peers else 'the receiver'} may have"
                                  f" received the later value.",
                [r], op=evs[0].get("op"), sites={r: site}, details={"peers": peers, "count": len(evs)}))
    return out


def async_unwaited(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    out = []
    for r, t in sorted(tracks.items()):
        if t.end is None:
            continue
        # a request torch's own code made (`internal`: Join's, DDP's) is waited on in C++, where no wait is seen
        for p in sorted((p for p in t.posted.values() if not p.get("internal")), key=lambda p: p["id"]):
            target = f" to rank {p['peer']}" if p["op"] in SENDS and p.get("peer") is not None else (
                f" from rank {p['peer']}" if p["op"] in RECVS and p.get("peer") is not None else "")
            out.append(ContractWarning(
                "async_unwaited", f"Rank {r}'s {p['op']}{target} at {where(p)} was never waited on: the rank left "
                                  "with the request still pending.",
                [r], op=p["op"], group=p.get("group"), seq=p.get("seq"), sites={r: where(p)},
                details={"peer": p.get("peer")} if p.get("peer") is not None else {}))
    return out

