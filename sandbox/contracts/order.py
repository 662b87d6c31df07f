"""Why ranks made their calls in different orders: a loop over a set. A set of strings iterates in the order of its
process's string-hash seed, and every process draws its own (torchrun's workers each do; the sandbox deals its ranks
among zygotes with seeds of their own, `sandbox.defaults.HASH_SEEDS`), so a collective per element is made in a
different order on different ranks: a mismatch, a hang, or (same shapes) sums of the wrong tensors.
`explain_order` notes it on a failed or hung run whose calls stand in such a loop (`sandbox.seeded.hash_order`)."""
from __future__ import annotations

from dataclasses import replace

from sandbox import seeded
from sandbox.result import Kind
from sandbox.track import RankTrack

_KINDS = {Kind.COLLECTIVE_MISMATCH, Kind.MISSING_RANKS, Kind.RANK_ERROR, Kind.RANK_CRASHED, Kind.P2P_CYCLE,
          Kind.P2P_UNMATCHED, Kind.WAIT_CYCLE, Kind.NONE}


def _sites(diagnosis, tracks: dict[int, RankTrack]) -> list[str]:
    """The call sites the failure stands on: the diagnosis', then each rank's pending or failed call's."""
    out = [diagnosis.site] + [(c or {}).get("site") for _, t in sorted(tracks.items())
                              for c in (t.pending, t.failed_call)]
    out += [c.get("site") for c in (diagnosis.details.get("calls") or {}).values() if isinstance(c, dict)]
    return list(dict.fromkeys(s for s in out if s))


def explain_order(diagnosis, tracks: dict[int, RankTrack]):
    """The diagnosis with a note naming the loop over a set its calls stand in (or the value a set's order or a
    string's hash made), and details["order"]; None if none. Every rank of the group is then a culprit: none is the
    odd one, each followed its own process's seed."""
    if diagnosis.kind not in _KINDS or "order" in diagnosis.details:
        return None
    for site in _sites(diagnosis, tracks):
        found = seeded.hash_order(site)
        if found is not None and "hash" in found and "loop" in found:
            note = (f"The call at {site} is made in the loop at {found['loop']} over `{found['iter']}`, laid out by"
                    f" `{found['hash']}` at {found['made']}: Python's hash of a string follows its process's"
                    f" string-hash seed, and every rank's process has its own (as each of torchrun's workers does), so"
                    f" the ranks' loops walk different things. Use a hash that is the same in every process"
                    f" (zlib.crc32 of the name's bytes), or set PYTHONHASHSEED for every rank.")
        elif found is not None and "hash" in found:
            at = f" at {found['hash_at']}" if found.get("hash_at", found["made"]) != found["made"] else ""
            note = (f"The call at {site} takes `{found['value']}`, made at {found['made']} from `{found['hash']}`{at}:"
                    f" Python's hash of a string follows its process's string-hash seed, and every rank's process"
                    f" has its own (as each of torchrun's workers does), so the ranks disagree on it. Use a hash that"
                    f" is the same in every process (zlib.crc32 of the name's bytes), or set PYTHONHASHSEED for every"
                    f" rank.")
        elif found is not None and "value" in found:
            note = (f"The call at {site} takes `{found['value']}`, made at {found['made']} while iterating"
                    f" `{found['iter']}` in the order of the set `{found['set']}`: holding strings, a set iterates in"
                    f" the order of its process's string-hash seed, and every rank's process has its own (as each of"
                    f" torchrun's workers does), so the ranks disagree on it. Iterate `sorted({found['set']})`, or"
                    f" set PYTHONHASHSEED for every rank.")
        elif found is not None:
            note = (f"The call at {site} is made in the loop at {found['loop']} over `{found['iter']}`, in the order"
                    f" of the set `{found['set']}` (made at {found['made']}): holding strings, a set iterates in the"
                    f" order of its process's string-hash seed, and every rank's process has its own (as each of"
                    f" torchrun's workers does), so the ranks make these calls in different orders. Iterate"
                    f" `sorted({found['set']})`, or set PYTHONHASHSEED for every rank.")
        else:
            continue
        # no rank is the odd one: each took the order (or the value) of its own seed
        everyone = sorted(r for r in tracks if not diagnosis.group or r in diagnosis.group)
        return replace(diagnosis.noted(note), culprit_ranks=everyone or diagnosis.culprit_ranks,
                       details={**diagnosis.details, "order": found})
    return None
