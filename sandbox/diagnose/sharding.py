"""FSDP's collectives in FSDP's terms: a collective mismatch whose calls FSDP made (its all_gather of a parameter
group's flat buffer before a forward, its reduce_scatter of the gradients after a backward) is a wrapping that
differs from rank to rank, and the user wrote `fully_shard` calls, not all_gathers, so the diagnosis says so.

FSDP2 (`torch.distributed.fsdp.fully_shard`) makes its collectives from Python, so the tracer records them, with
the user's forward or backward line as their site; that they are FSDP's is read from the ranks' own frames (an
error's traceback, a hung rank's stack), which pass through torch/distributed/fsdp. Torch-free.
"""
from __future__ import annotations

import re

from sandbox import words
from sandbox.calls import ALL_GATHERS, REDUCE_SCATTERS
from sandbox.events import RankTrack
from sandbox.result import Diagnosis, Kind

GATHERS, SCATTERS = ALL_GATHERS, REDUCE_SCATTERS  # every form of each: `sandbox.calls`'s families
FSDP_FRAMES = re.compile(r"torch[/\\]distributed[/\\](?:fsdp|_composable[/\\]fsdp)[/\\]")

FSDP_RULE = ("Every rank must call fully_shard on the same modules, in the same order, so that every rank makes the"
             " same parameter groups: a wrapping policy must depend on the model alone (no per-rank setting, threshold"
             " read per rank, or free-memory reading).")


def made_by_fsdp(tracks: dict[int, RankTrack], ranks) -> bool:
    """Did FSDP make the call these ranks were in? Their error's traceback or their stack passes through it."""
    for r in ranks:
        t = tracks.get(r)
        if t is None:
            continue
        if FSDP_FRAMES.search(((t.error or {}).get("traceback") or "") + "\n" + (t.stack or "")):
            return True
    return False


def fsdp_words(d: Diagnosis | None, tracks: dict[int, RankTrack]) -> Diagnosis | None:
    """A collective mismatch in a call FSDP made, with what it means in FSDP's terms added; any other diagnosis
    unchanged."""
    if d is None or d.kind != Kind.COLLECTIVE_MISMATCH or d.op not in GATHERS | SCATTERS:
        return d
    members = [int(r) for r in d.details.get("calls", {})] or list(tracks)
    if not made_by_fsdp(tracks, members):
        return d
    what = ("its all_gather of one fully_shard group's parameters before that group's forward (or the backward's"
            " re-gather): a flat buffer of this rank's shard of every parameter in the group"
            if d.op in GATHERS else
            "its reduce_scatter of one fully_shard group's gradients after that group's backward: a flat buffer of"
            " the gradients of every parameter in the group")
    note = (f"This call is FSDP's, {what}. Its size differs from rank to rank because the ranks put different"
            f" parameters in the group: they applied fully_shard to different modules, so their groups, and the"
            f" number of all_gathers and reduce_scatters in each step, differ. {FSDP_RULE}")
    return d.noted(note)


FSDP_STEPS_ADVICE = ("Under FSDP every rank must run the same number of forward and backward passes, since each"
                     " gathers and scatters with all the others: give every rank the same number of batches"
                     " (DistributedSampler, which pads its shards to one length, or drop_last=True), or agree on"
                     " when to stop (all_reduce a 'done' flag every step).")


def fsdp_uneven(tracks: dict[int, RankTrack], pend: dict[int, dict]) -> Diagnosis | None:
    """Ranks stuck in one of FSDP's all_gathers or reduce_scatters while the rest of their group finished: the
    stuck ones ran more steps (FSDP's collectives are Python calls, which the tracer sees)."""
    stuck = {r: p for r, p in pend.items() if p.get("op") in GATHERS | SCATTERS and p.get("group")}
    if not stuck or not made_by_fsdp(tracks, stuck):
        return None
    r, p = min(stuck.items())
    rest = sorted(set(p["group"]) - set(stuck))
    if not rest or not all(tracks.get(q) is not None and (tracks[q].end or {}).get("outcome") == "ok"
                           for q in rest):
        return None
    cause = (f"{words.ranks(sorted(stuck)).capitalize()} ran more steps than {words.ranks(rest)}, which already"
             f" finished: {'its' if len(stuck) == 1 else 'their'} FSDP {p['op']} #{p.get('seq')} of group"
             f" {p['group']} at {p.get('site')} has no partner. {FSDP_STEPS_ADVICE}")
    return Diagnosis(kind=Kind.UNEVEN_STEPS, cause=cause, culprit_ranks=sorted(stuck), op=p["op"], group=p["group"],
                     seq=p.get("seq"), site=p.get("site"), details={"finished": rest})
