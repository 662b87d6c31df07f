"""FSDP's collectives in FSDP's terms: a collective mismatch whose calls FSDP made (its all_gather of a parameter
group's flat buffer before a forward, its reduce_scatter of the gradients after a backward) is a wrapping that
differs from rank to rank, and the user wrote `fully_shard` calls, not all_gathers, so the diagnosis says so.

FSDP2 (`torch.distributed.fsdp.fully_shard`) makes its collectives from Python, so the tracer records them, with
the user's forward or backward line as their site; that they are FSDP's is read from the ranks' own frames (an
error's traceback, a hung rank's stack), which pass through torch/distributed/fsdp. Torch-free.
"""
from __future__ import annotations

import re

from sandbox.events import RankTrack
from sandbox.result import Diagnosis

GATHERS = {"all_gather_single", "all_gather_into_tensor", "all_gather_coalesced", "all_gather"}
SCATTERS = {"reduce_scatter_single", "reduce_scatter_tensor", "reduce_scatter"}
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
    if d is None or d.kind != "collective_mismatch" or d.op not in GATHERS | SCATTERS:
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
