"""Contracts checked over the traces of a run that is over, whatever its verdict: a run that finished can still be
wrong. gloo may pair two calls the contract says must be equal (an all_reduce with an all_gather of the same size),
a race may have gone the lucky way, or NCCL may have moved the wrong bytes without a word. Each breach is a
`ContractWarning`: the ranks, the call (op, group, sequence number), the call sites, one sentence, and the rule.

No torch here: live runs (`sandbox.launcher`) and trace directories (`python -m sandbox.diagnose DIR`) are checked
by the same code. Only calls that returned are judged, so a run that hung or crashed is not warned about what its
failure already explains; what its finished calls broke is still said.

`breaches(tracks)` lists them; `explain(diagnosis, warnings, tracks)` notes in a failed run's diagnosis the
warning that explains it. The rules live by family: `collectives` (the same calls, as many, the same groups),
`p2p` (sends meet recvs, no send cycle, requests waited on, isend tensors left alone until then), `lifecycle`
(devices inside objects, the group destroyed, and `explain`), `arguments` (what torch reads a group, a root or a
missing src as); `base` holds the warning type and the rules in words.
"""
from __future__ import annotations

from sandbox.contracts.arguments import any_source, group_member, rank_spaces
from sandbox.contracts.base import RULES, ContractWarning
from sandbox.contracts.collectives import call_counts, collectives_differ, completed, groups_differ
from sandbox.contracts.order import data_order
from sandbox.contracts.lifecycle import ddp_order, explain, not_destroyed, object_devices
from sandbox.contracts.p2p import async_unwaited, buffer_written, p2p_unmatched, send_cycles
from sandbox.events import RankTrack

__all__ = ["RULES", "ContractWarning", "breaches", "explain"]


def breaches(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    """Every contract breach the traces show, in a stable order."""
    tracks = dict(sorted(tracks.items()))
    done = {r: completed(t) for r, t in tracks.items()}
    return (collectives_differ(done) + groups_differ(tracks) + p2p_unmatched(tracks) + send_cycles(tracks)
            + async_unwaited(tracks) + buffer_written(tracks) + call_counts(tracks) + object_devices(tracks)
            + not_destroyed(tracks) + group_member(tracks) + any_source(tracks) + rank_spaces(tracks)
            + ddp_order(tracks) + data_order(tracks))
