"""Why ranks made their calls in different orders: a loop over a set. A set of strings iterates in the order of its
process's string-hash seed, and every process draws its own (torchrun's workers each do; the sandbox deals its ranks
among zygotes with seeds of their own, `sandbox.defaults.HASH_SEEDS`), so a collective per element is made in a
different order on different ranks: a mismatch, a hang, or (same shapes) sums of the wrong tensors.
`explain_order` notes it on a failed or hung run whose calls stand in such a loop (`sandbox.seeded.hash_order`).

The same happens without a set: a tensor laid out from a dict (or list) that each rank filled in the order its own
share of the data met the keys, then combined place by place (`sandbox.diagnose.positions`). `data_order` warns of
such a call whatever the run came to (its sums are wrong even where nothing fails), and `explain_order` notes it on
a failed run."""
from __future__ import annotations

from dataclasses import replace

from sandbox import seeded
from sandbox.calls import COLLECTIVES
from sandbox.contracts.base import ContractWarning
from sandbox.diagnose import positions
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


def _filled_words(found: dict) -> str:
    """How a container got an order of the rank's own: the fill, and the loop or the sort behind it."""
    if found["by"] == "sorted":
        return f"`{found['iterated']}` at {found['at']} orders them by `{found['control']}`, a value of each rank's own"
    how = f"in the loop over `{found['control']}` at {found['site']}, which walks this rank's own share"
    if "through" in found:
        how = (f"in the loop over `{found['control']}` at {found['site']}, in the order of "
               f"`{found['through']['container']}`: " + _filled_words(found["through"]))
    return f"`{found['container']}` was filled by `{found['fill']}` at {found['filled']}, {how}"


def _order_words(site: str, op: str, found: dict) -> str:
    if "loop" in found:
        made = (f"The {op} at {site} is made once per item of the loop at {found['loop']} over "
                f"`{found['iterated']}`, so the ranks' calls pair up items by their place in that order")
    else:
        made = (f"The {op} at {site} combines its tensors place by place across ranks, and each rank laid its "
                f"tensor out from `{found['iterated']}` (at {found['at']})")
    return (f"{made}; {_filled_words(found)}. So each rank's order is its own, and the {op} pairs unlike things."
            f" Use one order on every rank (sorted keys, or one fixed list of keys that every rank fills).")


def data_order(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    """Each call site of a collective made in a loop over a container that each rank ordered its own way, or (one
    that pairs tensors by position, `positions.BY_POSITION`) whose tensor was laid out from one; its ranks are those
    that made it (none of them is the odd one)."""
    sites: dict[tuple, set] = {}
    for r, t in sorted(tracks.items()):
        for p in t.events:
            if p.get("ev") == "enter" and p.get("op") in COLLECTIVES and p.get("site"):
                sites.setdefault((p["site"], p["op"]), set()).add(r)
    out = []
    for (site, op), ranks in sites.items():
        found = positions.data_order(site, op)
        if found is not None and len(ranks) > 1:
            out.append(ContractWarning("data_order", _order_words(site, op, found), sorted(ranks), op=op,
                                       sites={r: site for r in ranks}, details=found))
    return out


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
            op = next((c.get("op") for _, t in sorted(tracks.items()) for c in (t.pending, t.failed_call)
                       if c and c.get("site") == site), None) or diagnosis.op or ""
            found = positions.data_order(site, op)
            if found is None:
                continue
            return replace(diagnosis.noted(_order_words(site, op, found)),  # the run named the odd ranks
                           details={**diagnosis.details, "order": found})
        # no rank is the odd one: each took the order (or the value) of its own seed
        everyone = sorted(r for r in tracks if not diagnosis.group or r in diagnosis.group)
        return replace(diagnosis.noted(note), culprit_ranks=everyone or diagnosis.culprit_ranks,
                       details={**diagnosis.details, "order": found})
    return None
