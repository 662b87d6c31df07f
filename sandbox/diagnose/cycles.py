"""A deadlock that is a cycle of waits across process groups, named as one (`wait_cycle`): each rank of the cycle,
the call it is in and whom it waits for, the ranks waiting behind it, the ranks that left the path most ranks are
on, and where they parted. The graph and its cycle are `sandbox.diagnose.progress`'s (`graph`, `find_cycle`), which
also proves such a deadlock the moment its last rank blocks.
"""
from __future__ import annotations

from sandbox import branches, words
from sandbox.calls import is_collective, op_of
from sandbox.diagnose import origins, progress
from sandbox.result import Diagnosis, Kind

WAIT_CYCLE_ADVICE = (" Issue them in one order on every rank, computed the same way everywhere (not from a rank's own"
                     " data, timing or a set's iteration order).")


def wait_cycle(tracks, pend) -> Diagnosis | None:
    """A cycle in the wait-for graph (diagnose/progress.py) across process groups, one of its calls a collective:
    ranks blocked in different groups' collectives (or a collective and a point-to-point call of another group),
    each waiting for a rank that waits in another of them. Pure point-to-point cycles are `p2p`'s; a cycle within
    one group (ranks at calls of different numbers) is said by the mismatch rules or `missing`. The culprits are
    the ranks of the cycle that left the path most ranks are on (`_diverged`), else every rank of the cycle."""
    waits = progress.graph(tracks, pend)
    ring = progress.find_cycle(tracks, waits)
    if ring is None:
        return None
    if not progress.across_groups(waits, ring):
        return None  # within one group, the calls' order is its sequence: a mismatch, or ranks missing from a call
    held = progress.behind(waits, ring)
    odd = _diverged(tracks, waits, ring, held)
    culprits = odd or sorted(ring)
    start = ring.index(culprits[0])
    ring = ring[start:] + ring[:start]
    said = _group_words([waits[r].call for r in ring + held])
    steps = ", ".join(f"{'rank ' + str(r) if i == 0 else 'which'} waits in {said(waits[r].call)} at"
                      f" {waits[r].call.get('site')} for rank {ring[(i + 1) % len(ring)]}" for i, r in enumerate(ring))
    ids = {r: progress.identity(waits[r]) for r in ring + held}
    camps: dict = {}
    for r in held:
        camps.setdefault(ids[r], []).append(r)
    in_ring = {ids[r] for r in ring}
    behind = "".join(f" {words.ranks(rs).capitalize()} {'waits' if len(rs) == 1 else 'wait'} behind them, in "
                     + (f"the same {op_of(waits[rs[0]].call)}" if i in in_ring
                        else f"{said(waits[rs[0]].call)} at {waits[rs[0]].call.get('site')}") + "."
                     for i, rs in camps.items())
    firsts: dict = {}
    for r in ring + held:
        firsts.setdefault(ids[r], []).append(r)
    orders = "; ".join(f"{words.ranks(rs)} the {said(waits[rs[0]].call, short=True)}" for rs in firsts.values())
    why = ""
    for r in odd:  # where the first rank that left the common path branched off it
        frames = branches.frames_of(tracks.get(r), waits[r].call)
        b = branches.rank_branch(frames) or origins.data_branch(frames)
        if b is not None:
            why = f" Rank {r} got to its call {branches.through(b)}{origins.because(b) if 'reads' in b else ''}."
            break
    if not why:  # no rank left a common path: where the ranks' ways part, when one `if` sent them different ways
        found = {r: branches.rank_branch(f) or origins.data_branch(f)
                 for r, f in ((r, branches.frames_of(tracks.get(r), waits[r].call)) for r in ring)}
        if all(found.values()) and len({b["site"] for b in found.values()}) == 1 and len(
                {b["taken"] for b in found.values()}) > 1:
            b = found[ring[0]]
            arms = ", ".join(f"{words.ranks([r for r in ring if found[r]['taken'] == arm])} its {arm}"
                             for arm in ("if", "else") if any(found[r]["taken"] == arm for r in ring))
            why = (f" The ranks parted at `if {b['test']}:` ({b['site']}){origins.because(b) if 'reads' in b else ''}:"
                   f" {arms.replace(' its ', ' took its ', 1)}.")
    groups = list(dict.fromkeys(said.group(waits[r].call) for r in ring))
    cause = (f"Wait cycle across {words.listed(groups)}: {steps}.{behind} The ranks issued these calls in different"
             f" orders ({orders} first), and none can return before another of them does.{why}{WAIT_CYCLE_ADVICE}")
    c0 = waits[ring[0]].call
    return Diagnosis(kind=Kind.WAIT_CYCLE, cause=cause, culprit_ranks=culprits, op=op_of(c0), group=c0.get("group"),
                     seq=c0.get("seq"), site=c0.get("site"),
                     details={"cycle": ring, "behind": held,
                              "waits": {str(r): {"call": words.call(waits[r].call), "site": waits[r].call.get("site"),
                                                 "for": sorted(waits[r].on)} for r in ring + held}})


class _group_words:
    """Calls in words with their groups told apart: 'group [2, 3]', or, where two groups have the same members,
    'the default group [0, 1]' and 'another group [0, 1]'."""

    def __init__(self, calls: list[dict]):
        names: dict = {}
        for c in calls:
            names.setdefault(str(c.get("group")), set()).add(c.get("gname"))
        self.twins = {g for g, ns in names.items() if len(ns) > 1}

    def group(self, c: dict) -> str:
        g = str(c.get("group"))
        if g not in self.twins:
            return f"group {g}"
        return f"the default group {g}" if c.get("gname") == "0" else f"another group {g}"

    def __call__(self, c: dict, short: bool = False) -> str:
        if short:
            return f"{op_of(c)} of {self.group(c)}" if is_collective(c) else op_of(c)
        text = words.call(c)
        return text.replace(f"of group {c.get('group')}", f"of {self.group(c)}", 1) if is_collective(c) else text


def _diverged(tracks, waits, ring: list[int], held: list[int]) -> list[int]:
    """The ranks of a wait cycle that left the path most ranks are on: the largest set of blocked ranks (two or more)
    stands at one place with one stack; a rank of the cycle elsewhere diverged unless that set of ranks already made
    a call at its call's line (then it is only behind them on the same path). [] when no such set stands out."""
    stacks: dict = {}
    for r in ring + held:
        stacks.setdefault(tuple(branches.frames_of(tracks.get(r), waits[r].call)), []).append(r)
    sizes = sorted((len(rs) for rs in stacks.values()), reverse=True)
    if sizes[0] < 2 or (len(sizes) > 1 and sizes[1] == sizes[0]):
        return []
    most = max(stacks.values(), key=len)

    def been_at(m: int, site) -> bool:
        t = tracks.get(m)
        now = waits[m].call.get("id")
        return t is not None and any(ev.get("ev") == "enter" and ev.get("site") == site and ev.get("id") != now
                                     for ev in t.events)
    return sorted(r for r in ring if r not in most
                  and not all(been_at(m, waits[r].call.get("site")) for m in most))
