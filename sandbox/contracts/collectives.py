"""Contracts of collectives: every rank of a group makes the same call at the same point (what must match is
`sandbox.calls`' to say, at FULL level: the reduce op too), as many of them, and creates the same groups."""
from __future__ import annotations

from sandbox import branches, calls
from sandbox.calls import COLLECTIVES, op_of
from sandbox.contracts.base import ContractWarning, branch_words, ended_ok, said, where
from sandbox.events import RankTrack
from sandbox.words import groups_differ as groups_differ_words, plural, ranks as ranks_words


def completed(t: RankTrack) -> dict[tuple, dict]:
    """(group name, sequence number) -> the enter event, for this rank's collectives that returned without an error
    (an NCCL one: finished on the GPU); the last BUCKET_WINDOW of each group."""
    return {k: t.by_bucket[k] for k, ok in t.passed.items() if ok and k in t.by_bucket}


def collectives_differ(done: dict[int, dict[tuple, dict]]) -> list[ContractWarning]:
    """The first call of each group that differed across ranks, and how many later ones did too (a loop repeats
    one mistake: one warning says it)."""
    buckets: dict[tuple, dict[int, dict]] = {}
    for r, made in done.items():
        for key, p in made.items():
            buckets.setdefault(key, {})[r] = p
    first: dict[str, ContractWarning] = {}
    for (gname, seq), members in sorted(buckets.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        what = calls.disagreements(members, calls.FULL)
        if not what:
            continue
        variants = [(rs, members[rs[0]]) for rs in calls.camps(members, calls.FULL)]
        if gname in first:
            first[gname].details["later"] = first[gname].details.get("later", 0) + 1
            continue
        group = next(iter(members.values())).get("group")
        told = "; ".join(f"{ranks_words(rs)} called {said(p)} at {where(p)}{branch_words(p)}" for rs, p in variants)
        odd = calls.odd_ones(members, calls.FULL)
        if what == ["splits"]:  # each rank's splits are its own: name the pairs that disagree, not camps
            pairs = calls.split_pairs(members)
            odd = sorted({a for a, *_ in pairs} - {b for _, b, *_ in pairs}) or odd  # senders only
            told = "; ".join(f"rank {a} sends {n} element{'s' if n != 1 else ''} to rank {b}, which expects {m}"
                             for a, b, n, m in pairs) + f" ({said(members[odd[0]])} at {where(members[odd[0]])})"
        first[gname] = ContractWarning(
            "collective_differs", f"Call #{seq} of group {group} completed but was not the same call on every "
                                  f"rank: {told}.",
            sorted(members), op=op_of(variants[0][1]), group=group, seq=seq,
            sites={r: where(p) for r, p in members.items()},
            details={"differs_in": what, "odd_ranks": odd}, culprits=_culprits(odd, variants, len(members)))
    for w in first.values():
        if w.details.get("later"):
            w.summary += f" {plural(w.details['later'], 'later call')} of this group differed too."
    return list(first.values())


def _culprits(odd: list[int], variants: list[tuple[list[int], dict]], n: int) -> list[int]:
    """The odd ones; where the camps are even (2 ranks, 1 and 1), the one camp that got there through the body of
    a rank-dependent `if` (`if rank == 0:`, not its else), if exactly one did."""
    if 2 * len(odd) < n:
        return odd
    taken = [rs for rs, p in variants if (b := branches.rank_branch(branches.site_frame(p.get("site"))))
             and b["taken"] == "if"]
    return taken[0] if len(taken) == 1 else odd


def groups_differ(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    """The first new_group call (counted per rank, those that returned) where the ranks disagree; later ones
    follow from it and are not repeated."""
    made = {r: [g for g in t.new_groups if not g.get("local_sync") and g["id"] not in t.open]
            for r, t in tracks.items()}
    for k in range(max((len(gs) for gs in made.values()), default=0)):
        at = {r: gs[k] for r, gs in made.items() if len(gs) > k}
        variants: dict[str, list[int]] = {}
        for r, g in sorted(at.items()):
            variants.setdefault(repr(g.get("ranks")), []).append(r)
        missing = [r for r in sorted(set(made) - set(at)) if ended_ok(tracks[r])]
        sites = {r: where(g) for r, g in at.items()}
        if len(variants) > 1:
            told = "; ".join(f"{ranks_words(rs)} created {at[rs[0]].get('ranks')} at {where(at[rs[0]])}"
                             for rs in variants.values())
            return [ContractWarning(
                "group_mismatch", groups_differ_words(k + 1, told), sorted(at), op="new_group", seq=k + 1,
                sites=sites)]
        if missing:
            g = next(iter(at.values()))
            return [ContractWarning(
                "group_mismatch", f"Only {ranks_words(sorted(at))} created group {g.get('ranks')} (new_group call "
                                  f"#{k + 1}, at {where(g)}); {ranks_words(missing)} never did.",
                sorted(at) + missing, op="new_group", seq=k + 1, sites=sites)]
    return []


def call_counts(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
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
        if not all(r in tracks and ended_ok(tracks[r]) for r in group):
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
                          + f". The first call {ranks_words(short)} never made is {said(extra)} at {where(extra)}"
                          + f"{branch_words(extra)}.",
            group, op=op_of(extra), group=group, seq=extra.get("seq"), sites={r: where(extra) for r in long_}))
    return out

