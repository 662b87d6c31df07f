"""Framework-level causes, named in the terms the user wrote: what DDP does in C++ (its gradient all_reduce, seen by
the Flight Recorder lens, `sandbox.flight`) and what its constructor and reducer say when the ranks disagree.

- `uneven_steps`: a rank made more (or fewer) gradient all_reduces in DDP's backward than its peers: it ran more
  steps (uneven inputs).
- `unused_parameters`: parameters that got no gradient on some ranks only (DDP's "Expected to have finished
  reduction in the prior iteration"), by name, with the rank-dependent branch that skips them.
- `model_differs`: the ranks built different models (DDP's constructor: "params[0] ... appears not to match").
"""
from __future__ import annotations

import re

from sandbox import branches, calls, words
from sandbox.events import RankTrack
from sandbox.result import Diagnosis, Kind

JOIN_ADVICE = ("Under DDP every rank must run the same number of steps: give every rank the same number of batches"
               " (DistributedSampler(drop_last=True), equal shards), or wrap the loop in `with model.join():`"
               " (torch.distributed.algorithms.join.Join), which lets a rank that ran out of data shadow the others'"
               " all_reduces.")
NO_SYNC_ADVICE = ("With gradient accumulation every rank must leave no_sync() on the same micro-step: agree on the"
                  " accumulation count before the loop (a constant, or all_reduce(MIN) of the per-rank counts);"
                  " never derive it from one rank's own data.")
UNUSED = re.compile(r"Expected to have finished reduction in the prior iteration")
UNUSED_INDICES = re.compile(r"Parameter indices which did not receive grad for rank (\d+):\s*([\d ]+)")
UNUSED_NAMES = re.compile(r"Parameters which did not receive grad for rank (\d+):\s*([^\n]+)")
COUNT = re.compile(r"DDP expects same model across all ranks, but Rank (\d+) has (\d+) params, while rank (\d+) has"
                   r" inconsistent (\d+) params")
SAME_MODEL = ("Build the same model on every rank: agree on what sets its sizes before building it (read the config"
              " once, on rank 0, and broadcast it with broadcast_object_list; compute a vocabulary or label set from"
              " the whole dataset, or gather every rank's part, not from this rank's shard; or give every rank the"
              " same file).")
SHAPES = re.compile(r"params\[(\d+)\] in this process with sizes \[([^\]]*)\] appears not to match sizes of the"
                    r" same param in process (\d+)")


def _backward_calls(t: RankTrack) -> list[dict]:
    """The gradient all_reduces DDP's reducer made: the recorder's all_reduces the tracer did not see (those made
    under backward(), where the recorder kept the frames)."""
    flight = [ev for ev in t.events if ev.get("ev") == "enter" and ev.get("lens") == "flight"
              and ev.get("op") == "all_reduce"]
    if any(ev.get("via") for ev in flight[:-1]):  # a dump with frames says which were made under backward()
        return [ev for ev in flight if ev.get("via") == "backward()"]
    return flight


def uneven_steps(tracks: dict[int, RankTrack], pend: dict[int, dict]) -> Diagnosis | None:
    """A rank stuck (or failed) in a gradient all_reduce of DDP's backward, having made more or fewer of them than
    its peers."""
    # in backward() (gloo blocks the host there), or queued: NCCL puts the all_reduce on the GPU stream and the
    # host goes on until it waits for the GPU (a .item(), a copy to the CPU), so the stack shows no backward()
    stuck = {r: p for r, p in pend.items() if p.get("lens") == "flight" and p.get("op") == "all_reduce"
             and (p.get("via") == "backward()" or (p.get("via") is None and _queued(tracks[r])))}
    if not stuck:
        return None
    counts = {r: len(_backward_calls(t)) for r, t in tracks.items() if any(e.get("lens") == "flight" for e in t.events)}
    if len(set(counts.values())) < 2 or min(counts.values()) == 0 or _differed_before(tracks, stuck):
        return None  # a rank with no step at all did not run fewer steps: it stopped before training (or differs)
    by_count: dict[int, list[int]] = {}
    for r, c in counts.items():
        by_count.setdefault(c, []).append(r)
    odd = sorted(min(by_count.values(), key=lambda rs: (len(rs), -max(counts[r] for r in rs))))
    rest = sorted(set(counts) - set(odd))
    more = counts[odd[0]] > counts[rest[0]] if rest else True
    r = next((q for q in odd if q in stuck), next(iter(stuck)))
    p = stuck[r]
    size = p.get("shapes")[0] if p.get("shapes") else None
    told = "; ".join(f"{words.ranks(rs)} made {c}" for c, rs in sorted(by_count.items()))
    if branches.function_uses(p.get("site"), ".no_sync("):  # the loop accumulates gradients
        cause = (f"{words.ranks(odd).capitalize()} left DDP's no_sync() {'more' if more else 'less'} often than"
                 f" {words.ranks(rest)}: the backward outside no_sync() ({_backward_where(p)}) made a different"
                 f" number of gradient all_reduces on each ({told}), so the ranks synchronised on different"
                 f" micro-steps (their earlier all_reduces averaged gradients of different micro-batches) and"
                 f" {words.ranks([r])}'s all_reduce #{p.get('seq')} of group {p.get('group')} has no partner"
                 f"{_elsewhere(tracks, rest)}. {NO_SYNC_ADVICE}")
    else:
        cause = (f"{words.ranks(odd).capitalize()} ran {'more' if more else 'fewer'} training steps than"
                 f" {words.ranks(rest)}: DDP's backward ({_backward_where(p)}) made a different number of"
                 f" gradient all_reduces on each ({told}), so {words.ranks([r])}'s all_reduce #{p.get('seq')} of group"
                 f" {p.get('group')}{f' ({size[0] if len(size) == 1 else size} elements)' if size else ''} has no"
                 f" partner{_elsewhere(tracks, rest)}. {JOIN_ADVICE}")
    return Diagnosis(kind=Kind.UNEVEN_STEPS, cause=cause, culprit_ranks=odd, op="all_reduce", group=p.get("group"),
                     seq=p.get("seq"), site=p.get("site"),
                     details={"gradient_all_reduces": {str(q): c for q, c in sorted(counts.items())},
                              "via": "backward()"})


def left_the_loop(tracks: dict[int, RankTrack], pend: dict[int, dict]) -> Diagnosis | None:
    """Ranks in a gradient all_reduce of DDP's backward met, at the same call of the group, by ranks in a call of
    their own code: those had left the training loop (fewer batches) and gone on (an evaluation's all_reduce)."""
    def gradient(p):
        return p and p.get("lens") == "flight" and p.get("op") == "all_reduce" and p.get("via") == "backward()"

    grads = {}
    for r, t in tracks.items():  # the call it failed in, where an open call older than it is also left over
        p = next((c for c in (pend.get(r), t.failed_call, t.pending) if gradient(c)), None)
        if p is not None:
            grads[r] = p
    if not grads:
        return None
    r, p = min(grads.items())
    gone = {q: o for q, o in pend.items() if q not in grads and o.get("gname") == p.get("gname")
            and o.get("seq") == p.get("seq") and o.get("via") != "backward()" and o.get("site")}
    if not gone:
        return None
    q, o = min(gone.items())
    cause = (f"{words.ranks(sorted(grads)).capitalize()} ran more training steps than {words.ranks(sorted(gone))}:"
             f" {'it was' if len(grads) == 1 else 'they were'} still in DDP's backward ({_backward_where(p)}, its"
             f" gradient all_reduce #{p.get('seq')} of group {p.get('group')}) when {words.ranks(sorted(gone))} had"
             f" left the loop and made {words.call(o)} at {o.get('site')}, so the two met at one call of the group."
             f" {JOIN_ADVICE}")
    return Diagnosis(kind=Kind.UNEVEN_STEPS, cause=cause, culprit_ranks=sorted(grads), op="all_reduce",
                     group=p.get("group"), seq=p.get("seq"), site=p.get("site"),
                     details={"met_by": {str(x): words.call(y) for x, y in sorted(gone.items())}, "via": "backward()"})


def _differed_before(tracks: dict[int, RankTrack], stuck: dict[int, dict]) -> bool:
    """Did the ranks already make different calls earlier in the group (a model that differs makes DDP's own
    broadcasts differ before any step)? Then that is the cause, not the number of steps."""
    p = next(iter(stuck.values()))
    slots: dict[int, dict[int, dict]] = {}
    for r, t in tracks.items():
        for (g, seq), q in t.by_bucket.items():
            if g == p.get("gname") and isinstance(seq, int) and seq < (p.get("seq") or 0):
                slots.setdefault(seq, {})[r] = q
    return any(len(m) > 1 and calls.disagreements(m, calls.FULL) for m in slots.values())


def _elsewhere(tracks: dict[int, RankTrack], rs: list[int]) -> str:
    """': ranks 0-2 are in barrier #9 ... at train.py:20' (ranks named together where they are in the same place)."""
    at: dict[str, list[int]] = {}
    for r in rs:
        at.setdefault(words.where(tracks[r]), []).append(r)
    return (": " + "; ".join(f"{words.ranks(qs)} {'is' if len(qs) == 1 else 'are'} {w}" for w, qs in at.items())
            if at else "")


def _queued(t: RankTrack) -> bool:
    """Does this rank's backend queue collectives on a GPU stream (NCCL), so the host may be past the call?"""
    return any(str(ev.get("backend", "")).lower() == "nccl" for ev in t.events if ev.get("op") == "init_process_group")


def _backward_where(p: dict) -> str:
    if p.get("via") == "backward()":
        return _line(p)
    return (f"its all_reduce queued on the GPU stream, while the host went on to {_line(p)}, where it waits for the"
            f" GPU")


def _line(p: dict) -> str:
    """'loss.backward() at train.py:17': the user's line of a call, with its source text when it can be read."""
    text = branches.source_line(p.get("site"))
    return f"`{text}` at {p.get('site')}" if text else f"{p.get('via')} at {p.get('site')}"


def _ddp_params(t: RankTrack | None) -> list[list]:
    return (t.ddp[-1].get("params") or []) if t is not None and t.ddp else []


def unused_parameters(tracks: dict[int, RankTrack]) -> Diagnosis | None:
    """Ranks whose DDP raised "Expected to have finished reduction": the parameters that got no gradient there, by
    name, the ranks where they did, and the rank-dependent `if` that makes the difference."""
    raised = {r: t.error for r, t in tracks.items() if t.error and UNUSED.search(t.error.get("message") or "")}
    if not raised:
        return None
    names: dict[int, list[str]] = {}
    for r, e in raised.items():
        msg = e.get("message") or ""
        m = UNUSED_NAMES.search(msg)
        if m:
            names[r] = [n.strip() for n in m.group(2).split(",") if n.strip()]
            continue
        m = UNUSED_INDICES.search(msg)
        params = _ddp_params(tracks[r])
        if m:
            idx = [int(i) for i in m.group(2).split()]
            names[r] = [params[i][0] if i < len(params) else f"parameter #{i}" for i in idx]
    others = sorted(set(tracks) - set(raised))
    first = min(raised)
    unused = names.get(first) or []
    # every module on the parameters' paths (moe.experts.1.0.weight: moe, experts): the `if` may skip any of them
    attrs = sorted({part for n in unused for part in n.split(".")[:-1] if not part.isdigit()})
    files = sorted({ev["site"].rpartition(":")[0] for t in tracks.values() for ev in t.events + t.ddp
                    if isinstance(ev.get("site"), str) and ":" in ev["site"]})
    branch = (branches.branch_using(files, attrs) or branches.branch_using(files, attrs, rank_dependent=False)
              if attrs else None)
    e = raised[first]
    named = (f"Parameter{'s' if len(unused) > 1 else ''} {words.listed(unused)}" if unused else "Some parameters")
    cause = (f"{named} got no gradient on {words.ranks(sorted(raised))}"
             + (f" but did on {words.ranks(others)}" if others else "") +
             f": DDP all_reduces a bucket of gradients only once every parameter in it has one, so the ranks stopped"
             f" agreeing on their gradient all_reduces, and {words.ranks(sorted(raised))} raised \"Expected to have"
             f" finished reduction in the prior iteration\" at {e.get('site')}.")
    waited = {r: (tracks[r].pending or tracks[r].failed_call) for r in others}
    waited = {r: p for r, p in waited.items() if p is not None and p.get("lens") == "flight"}
    if waited:
        r, p = min(waited.items())
        cause += (f" {words.ranks(sorted(waited)).capitalize()} all_reduced the bucket ({words.call(p)} at"
                  f" {p.get('site')}) and waited for ranks that never would.")
    used = ", ".join("self." + a for a in branch["attrs"]) if branch else ""
    if branch and branch.get("skips"):
        used = f"{used} (its `continue` skips them in the loop at {branch['skips']})"
    if branch and branches.RANKISH.search(branch["test"]):
        cause += f" The forward differs by rank: `if {branch['test']}:` at {branch['site']} uses {used} on some ranks only."
    elif branch:  # a test on the data: it came out one way on some ranks, the other way on the rest
        cause += (f" The forward takes another path on {words.ranks(sorted(raised))}: `if {branch['test']}:` at"
                  f" {branch['site']} uses {used}, and its test went the other way there (a branch on the data).")
    cause += (" Make the forward use the same parameters on every rank (run the layer everywhere and multiply its"
              " output by 0 where it is not wanted), or pass find_unused_parameters=True to DistributedDataParallel"
              " (it then walks the autograd graph after every forward to mark unused parameters ready, which costs"
              " time each step).")
    # the odd ones: the few ranks whose forward used the parameters, or the few where it skipped them; on a tie,
    # the ranks that used them (their shard is the one that differs, as in a dataset sorted by source)
    odd = others if others and len(others) <= len(raised) else sorted(raised)
    if branch and branch.get("skips"):  # the ranks that took its `continue` skipped them: they went off
        odd = sorted(raised)
    return Diagnosis(kind=Kind.UNUSED_PARAMETERS, cause=cause, culprit_ranks=odd,
                     site=branch["site"] if branch else e.get("site"),
                     details={"unused": {str(r): ns for r, ns in sorted(names.items())},
                              **({"branch": {k: branch[k] for k in ("test", "site")}} if branch else {})})



def model_differs(tracks: dict[int, RankTrack]) -> Diagnosis | None:
    """DDP's constructor found the ranks' models differ: which parameter, its shape on each rank."""
    for r, t in sorted(tracks.items()):
        m = SHAPES.search((t.error or {}).get("message") or "")
        if not m:
            continue
        i = int(m.group(1))
        shapes: dict[tuple, list[int]] = {}
        name = None
        for q, u in sorted(tracks.items()):
            params = _ddp_params(u)
            if i < len(params):
                name = name or params[i][0]
                shapes.setdefault(tuple(params[i][1]), []).append(q)
        if len(shapes) < 2:  # no records of the others: what DDP said
            shapes = {tuple(int(x) for x in m.group(2).split(",") if x.strip()): [r]}
        camps = sorted(shapes.items(), key=lambda kv: (len(kv[1]), kv[1]))
        odd = camps[0][1] if len(camps) > 1 else [r]
        site = (t.ddp[-1].get("site") if t.ddp else None) or t.error.get("site")
        told = "; ".join(f"{words.ranks(rs)} {'has' if len(rs) == 1 else 'have'} {list(s)}" for s, rs in camps)
        cause = (f"The ranks built different models: at DistributedDataParallel(...) ({site}) parameter"
                 f" {name or f'#{i}'} differs: {told}. DDP's constructor checks every parameter's shape across"
                 f" ranks and stops. {SAME_MODEL}")
        return Diagnosis(kind=Kind.MODEL_DIFFERS, cause=cause, culprit_ranks=odd, op="DistributedDataParallel",
                         site=site, details={"param": name or i, "shapes": {str(list(s)): rs for s, rs in camps}})
    return _params_count_differs(tracks)


def _params_count_differs(tracks: dict[int, RankTrack]) -> Diagnosis | None:
    """DDP's constructor found the ranks' models hold different numbers of parameters (a layer more on some)."""
    said = next(((r, m) for r, t in sorted(tracks.items())
                 if (m := COUNT.search((t.error or {}).get("message") or ""))), None)
    if said is None:
        return None
    r, m = said
    counts: dict[int, list[int]] = {}
    for q, u in sorted(tracks.items()):
        if u.ddp:
            counts.setdefault(len(_ddp_params(u)), []).append(q)
    if len(counts) < 2:  # no records of the others: what DDP said
        counts = {int(m.group(2)): [int(m.group(1))], int(m.group(4)): [int(m.group(3))]}
    camps = sorted(counts.items(), key=lambda kv: (len(kv[1]), kv[1]))
    t = tracks[r]
    site = (t.ddp[-1].get("site") if t.ddp else None) or t.error.get("site")
    told = "; ".join(f"{words.ranks(rs)} {'has' if len(rs) == 1 else 'have'} {n}" for n, rs in camps)
    cause = (f"The ranks built different models: at DistributedDataParallel(...) ({site}) the number of parameters"
             f" differs: {told}. DDP's constructor checks the count and every shape across ranks and stops."
             f" {SAME_MODEL}")
    return Diagnosis(kind=Kind.MODEL_DIFFERS, cause=cause, culprit_ranks=camps[0][1], op="DistributedDataParallel",
                     site=site, details={"param_counts": {str(n): rs for n, rs in camps}})


def _made_under(t: RankTrack, via: str) -> int:
    return sum(1 for ev in t.events if ev.get("ev") == "enter" and ev.get("lens") == "flight" and ev.get("via") == via)


def bucket_without_partner(tracks: dict[int, RankTrack], pend: dict[int, dict]) -> Diagnosis | None:
    """From dumps with frames alone (no error messages): ranks stuck in a gradient all_reduce of DDP's backward
    while the others, through DDP's construction like them, made no gradient all_reduce at all: on those, some
    parameters got no gradient, so their reducer never launched the bucket."""
    # in backward() (gloo blocks the host there), or queued: NCCL puts the all_reduce on the GPU stream and the
    # host goes on until it waits for the GPU (a .item(), a copy to the CPU), so the stack shows no backward()
    stuck = {r: p for r, p in pend.items() if p.get("lens") == "flight" and p.get("op") == "all_reduce"
             and (p.get("via") == "backward()" or (p.get("via") is None and _queued(tracks[r])))}
    if not stuck:
        return None
    built = {r: _made_under(t, "DistributedDataParallel(...)") for r, t in tracks.items()}
    others = sorted(r for r in tracks if r not in stuck and tracks[r].events)
    if (not others or len(set(built.values())) != 1 or not next(iter(built.values()))
            or any(_made_under(tracks[r], "backward()") for r in others)):
        return None
    r, p = min(stuck.items())
    cause = (f"{words.ranks(sorted(stuck)).capitalize()} all_reduced a bucket of gradients in DDP's backward"
             f" ({words.call(p)} at {p.get('site')}) that {words.ranks(others)} never did: through DDP's"
             f" construction like {'it' if len(stuck) == 1 else 'them'}, they made no gradient all_reduce at all."
             " DDP launches a bucket's all_reduce only once every parameter in it has a gradient, so on"
             f" {words.ranks(others)} some parameters got none (a forward that skips a layer there). The dumps do"
             " not name the parameters (the sandbox's live run does). Make the forward use the same parameters on"
             " every rank, or pass find_unused_parameters=True to DistributedDataParallel.")
    return Diagnosis(kind=Kind.UNUSED_PARAMETERS, cause=cause, culprit_ranks=sorted(stuck), op="all_reduce",
                     group=p.get("group"), seq=p.get("seq"), site=p.get("site"), details={"no_gradient_on": others})
