"""Contracts of what lives beyond a call: tensors inside objects keep their device, and the default group is
destroyed before the process leaves. And `explain`: a failure that a warning accounts for says so."""
from __future__ import annotations

from dataclasses import replace

from sandbox import calls, seeded
from sandbox.calls import SENDS, op_of
from sandbox.contracts.arguments import explain_arguments
from sandbox.contracts.order import explain_order
from sandbox.contracts.threads import explain_thread
from sandbox.contracts.base import ContractWarning, ended_ok, said, where
from sandbox.events import RankTrack
from sandbox.result import Kind
from sandbox.words import peer_lost, ranks as ranks_words

def object_devices(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    """Per object collective (by its site): ranks handed tensors on devices other than those they sent from."""
    by_call: dict[tuple, dict[int, tuple]] = {}
    for r, t in tracks.items():
        for rec in t.object_devices:
            own = set(rec["sent"])
            foreign = {int(src): sorted(set(devs) - own) for src, devs in rec["got"].items()
                       if src.lstrip("-").isdigit() and int(src) != r and set(devs) - own}
            if own and foreign:
                call = rec["call"]
                by_call.setdefault((call["op"], where(call)), {})[r] = (call, foreign, sorted(own))
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


def ddp_order(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    """Ranks whose DDP model holds the same parameters and buffers as the lowest rank's but in another order: DDP
    broadcasts them by position, so those ranks silently take the lowest rank's values under other names. Where
    the program registers them in a loop over a set (or in an order a string's hash made), that is said too."""
    built = {r: t.ddp[-1] for r, t in sorted(tracks.items()) if t.ddp}
    if len(built) < 2:
        return []

    def order(ev):
        return [n for n, _ in ev.get("params") or []] + ([n for n, _ in ev.get("buffers") or []]
                                                         if ev.get("broadcast_buffers", True) else [])
    first, ev0 = next(iter(built.items()))
    want = order(ev0)
    odd = {r: got for r, ev in built.items() if (got := order(ev)) != want and sorted(got) == sorted(want)}
    found = next((f for path in sorted({ev.get("site", "").rpartition(":")[0] for ev in built.values()} - {""})
                  if (f := seeded.registration_order(path)) is not None), None)
    source = (f" The order comes from the set `{found['set']}` (made at {found['made']}), iterated at"
              f" {found['loop']} to register them: a set of strings iterates in the order of its process's"
              f" string-hash seed, and each rank's process has its own. Iterate `sorted({found['set']})`."
              if found is not None else "")
    if not odd and found is not None and len({len(order(ev)) for ev in built.values()}) == 1:
        ranks = sorted(built)  # this run's seeds happened to agree: separate processes' mostly do not
        return [ContractWarning(
            "ddp_order", f"DistributedDataParallel at {where(ev0)} copies rank {first}'s parameters and buffers to"
                         f" the other ranks by position, and the program registers them in an order each process"
                         f" draws for itself. In this run the ranks' seeds happened to give one order; under"
                         f" torchrun every worker has a seed of its own, and ranks that get another order silently"
                         f" take rank {first}'s values under other names.{source}",
            ranks, op="DistributedDataParallel", sites={q: where(built[q]) for q in ranks},
            details={"registered": found})]
    if not odd:
        return []
    r, got = next(iter(odd.items()))
    i = next(k for k, (a, b) in enumerate(zip(want, got)) if a != b)
    ranks = sorted(odd)
    its = "its" if len(ranks) == 1 else "their"
    return [ContractWarning(
        "ddp_order", f"DistributedDataParallel at {where(ev0)} copied rank {first}'s parameters and buffers to the"
                     f" other ranks by position, and {ranks_words(ranks)} registered them in another order: at"
                     f" position {i}, rank {first} has `{want[i]}` and rank {r} `{got[i]}`, so"
                     f" {ranks_words(ranks)} silently took rank {first}'s `{want[i]}` as {its} `{got[i]}`.{source}",
        ranks, op="DistributedDataParallel", sites={q: where(built[q]) for q in ranks},
        details={"position": i, "first": want[i], "odd": {str(q): o[i] for q, o in odd.items()}})]


def not_destroyed(tracks: dict[int, RankTrack]) -> list[ContractWarning]:
    left = [(r, t.inits[-1]) for r, t in tracks.items() if t.inits and not t.destroyed and ended_ok(t)]
    if not left:
        return []
    rs = [r for r, _ in left]
    return [ContractWarning(
        "not_destroyed", f"{ranks_words(rs).capitalize()} exited without destroying the default process group "
                         f"(initialised at {where(left[0][1])}).", rs, op="destroy_process_group",
        sites={r: where(p) for r, p in left})]


def explain(diagnosis, warnings: list[ContractWarning], tracks: dict[int, RankTrack]):
    """A failed run whose failure a warning explains: the diagnosis saying so (a note, and details["contract"]).
    Today: a device-mismatch error on a rank that an object collective handed tensors from other devices, and a
    receiver whose connection closed because the sender left with its isend never waited on."""
    root = _earlier_root(diagnosis, warnings, tracks)
    if root is not None:  # the root's calls may have come from different threads: say so of the root
        return explain_thread(root, tracks) or root
    argued = explain_arguments(diagnosis, warnings, tracks)
    if argued is not None:
        return argued
    ordered = explain_order(diagnosis, tracks)
    if ordered is not None:
        return ordered
    threaded = explain_thread(diagnosis, tracks)
    if threaded is not None:
        return threaded
    for w in warnings:
        words = (_explain_device(w, diagnosis, tracks) if w.kind == "object_device" else
                 _explain_left_send(w, tracks) if w.kind == "async_unwaited" else
                 _explain_written(w, diagnosis) if w.kind == "buffer_written" else None)
        if words:  # the rank that left its isend behind (or wrote its tensor early) is the one to fix, not the
            # receiver that failed
            culprits = w.ranks if w.kind in ("async_unwaited", "buffer_written") else diagnosis.culprit_ranks
            return replace(diagnosis.noted(words), culprit_ranks=culprits,
                           details={**diagnosis.details, "contract": w.kind})
    return diagnosis


def _explain_written(w: ContractWarning, diagnosis) -> str | None:
    """A receiver that failed (its own check of what it got, or anything downstream of it) after its sender wrote
    the isend's tensor before waiting: the sender's write is the cause."""
    failed = set(diagnosis.culprit_ranks) & set(w.details.get("peers") or ())
    if not failed or diagnosis.kind not in (Kind.RANK_ERROR, Kind.RANK_CRASHED, Kind.NONE):
        return None
    return (f"{w.summary} Rank {w.ranks[0]}, the sender, is the rank to fix: a fresh tensor per isend, or wait"
            f" before writing it.")


def _unlike_entered(diagnosis, tracks: dict[int, RankTrack]) -> ContractWarning | None:
    """The first call of the diagnosis' group before its own that the ranks entered as unlike calls, completed or
    still in flight (NCCL: rank 0's all_reduce #2 still on its stream behind the barrier #3 it waits in, while
    rank 1's barrier #2, paired with it, returned)."""
    at: dict[int, dict[int, dict]] = {}
    for r, t in tracks.items():
        for (_g, seq), p in t.by_bucket.items():
            if (isinstance(seq, int) and isinstance(diagnosis.seq, int) and seq < diagnosis.seq
                    and list(p.get("group") or ()) == list(diagnosis.group)):
                at.setdefault(seq, {})[r] = p
    for seq in sorted(at):
        members = at[seq]
        if len(members) > 1 and calls.disagreements(members, calls.FULL):
            told = "; ".join(f"{ranks_words(rs)} called {said(members[rs[0]])} at {where(members[rs[0]])}"
                             for rs in calls.camps(members, calls.FULL))
            return ContractWarning("collective_differs", f"Call #{seq} of group {diagnosis.group} was not the same"
                                   f" call on every rank: {told}.", sorted(members), op=op_of(members[min(members)]),
                                   group=diagnosis.group, seq=seq, details={"odd_ranks": []})
    return None


def _extra_callers(group: list, tracks: dict[int, RankTrack]) -> list[int]:
    """The ranks of a group that made more of its collectives than the others (the ones with a call too many), or
    [] when every rank made as many."""
    made = {r: max((k[1] for k, p in tracks[r].by_bucket.items() if isinstance(k[1], int)
                    and list(p.get("group") or ()) == list(group)), default=0) for r in group if r in tracks}
    most = max(made.values(), default=0)
    extra = sorted(r for r, n in made.items() if n == most)
    return extra if len(extra) < len(made) else []


def _earlier_root(diagnosis, warnings: list[ContractWarning], tracks: dict[int, RankTrack]):
    """A failure or hang in a group where an earlier call already completed as unlike calls (NCCL pairs a barrier
    with a one-element all_reduce, gloo an all_reduce of 4 elements with one of 5 on some ranks): that call is the
    root, and the diagnosis says so first."""
    if diagnosis.kind == Kind.COLLECTIVE_MISMATCH or diagnosis.group is None:
        return None
    entered = _unlike_entered(diagnosis, tracks)  # when no completed call says it (one side still in flight)
    for w in warnings + ([entered] if entered is not None else []):
        if (w.kind == "collective_differs" and w.group == diagnosis.group and isinstance(w.seq, int)
                and isinstance(diagnosis.seq, int) and w.seq < diagnosis.seq):
            return replace(diagnosis.led_by(f"The cause comes earlier: {w.summary} What follows is its"
                                            " consequence:"),
                           culprit_ranks=(_extra_callers(w.group, tracks) or w.details.get("odd_ranks")
                                          or diagnosis.culprit_ranks),
                           details={**diagnosis.details, "contract": w.kind, "root": {"seq": w.seq, "op": w.op}})
    return None


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


def _explain_left_send(w: ContractWarning, tracks) -> str | None:
    peer, [sender] = w.details.get("peer"), w.ranks
    err = tracks[peer].error if w.op in SENDS and peer in tracks else None
    if err and peer_lost(err.get("message")):
        return (f"Rank {sender}'s {w.op} to rank {peer} at {w.sites.get(sender)} was never waited on: rank {sender} "
                f"left with it still pending, which closed the connection rank {peer} was receiving on.")
    return None
