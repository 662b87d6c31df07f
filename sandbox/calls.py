"""The call contract: every torch.distributed op the sandbox knows, and what must match across ranks at one call.

This is the one place that decides it. The tracer (`sandbox.trace`) wraps the ops of `OPS` and writes each call's
summary with `signature`; the hang rule asks `matches(a, b, PAIR)` whether two ranks' calls can pair; the mismatch
rule and the contracts ask `disagreements(calls, FULL)` and `camps(calls, FULL)` what differs and who differs.
No torch here: the parent, the offline reader and a second source of calls (PyTorch's Flight Recorder) use it too.

A call is a plain dict of its fields (a trace's `enter` event is one; a source that is not the tracer builds the
same dict). Every field is optional except `op`:

- `op`: the function called (`"all_reduce"`, `"send"`, ...), or `"wait"` for `Work.wait()` with `of` the op waited
  on (the wait stands for that op: `op_of`).
- `rank`: the global rank that made the call (needed only to check `splits`).
- `gname`: the process group's name; `group`: its global ranks, in group-rank order; `seq`: the call's 1-based
  number among the collectives of that group on that rank. Ranks at the same `(gname, seq)` (its `slot`) are in
  one call, and everything below must match there.
- `root`: the src/dst of a rooted collective, as a global rank.
- `shapes`: this rank's contribution, one list of dims per tensor; `dtypes`: their dtypes without the `torch.`
  prefix (`"float32"`), one per tensor.
- `redop`: the reduce op of a reducing collective (`"SUM"`, `"MAX"`, ...).
- `splits`: for `all_to_all` and `all_to_all_single`, `[sent, received]`: the number of elements this rank sends
  to and receives from each member of the group, in group-rank order.
- `peer`, `tag`: the other rank and the tag of a point-to-point call; `p2p`: the ops of a `batch_isend_irecv`,
  each `{"op": "isend" | "irecv", "peer": ...}`.

Levels of strictness (a field is compared at a level, or not at all):

| field     | PAIR: the backend can pair the calls (hang rule) | FULL: the result is right (mismatch rule, contracts) |
| --------- | ------------------------------------------------ | ---------------------------------------------------- |
| op, group | yes                                              | yes                                                  |
| root      | yes                                              | yes                                                  |
| dtypes    | yes                                              | yes                                                  |
| shapes    | yes, except where they may differ (`Op.uneven`)  | the same                                             |
| splits    | each pair: what a sends b is what b gets from a  | the same                                             |
| redop     | no: gloo pairs a SUM with a MAX, and returns     | yes                                                  |
"""
from __future__ import annotations

from typing import Mapping, NamedTuple


class Op(NamedTuple):
    """What the sandbox knows about a torch.distributed function beyond its signature. The argument names are
    torch's (the tracer reads where each sits from the signature of the function it wraps)."""
    kind: str                        # "coll" (counts in its group's sequence), "p2p", "init", "new_group", "local"
    data: str | None = None          # the argument that is this rank's contribution (its shapes are recorded)
    root: str | None = None          # the argument naming the root (collectives) or the peer (p2p) as a global
    #                                  rank; "group_" + root names it as a rank of the group instead
    default_root: int | None = None  # the root torch takes when neither is given
    returns_work: bool = False       # asynchronous whatever its arguments
    direction: str | None = None     # "send" or "recv" for point-to-point ops
    uneven: bool = False             # the ranks' shapes may legitimately differ (uneven splits, a root's list)
    redop: str | None = None         # the argument holding the reduce op
    out: str | None = None           # the output argument, where `splits` are read from it (all_to_all)
    objects: tuple | None = None     # object collectives: (argument sent, argument received) holding objects
    synced: bool = False             # after it every rank of the group holds the same value (what it received)
    family: str | None = None        # one collective in several forms: "all_gather", "reduce_scatter"


OPS: dict[str, Op] = {
    "all_reduce": Op("coll", "tensor", redop="op", synced=True),
    "all_reduce_coalesced": Op("coll", "tensors", redop="op", synced=True),
    "all_gather": Op("coll", "tensor", synced=True, family="all_gather"),
    "all_gather_into_tensor": Op("coll", "input_tensor", synced=True, family="all_gather"),
    "all_gather_single": Op("coll", "input_tensor", synced=True, family="all_gather"),
    "all_gather_coalesced": Op("coll", "input_tensor_list", synced=True, family="all_gather"),
    "reduce_scatter": Op("coll", "input_list", redop="op", family="reduce_scatter"),
    "reduce_scatter_tensor": Op("coll", "input", redop="op", family="reduce_scatter"),
    "reduce_scatter_single": Op("coll", "input", redop="op", family="reduce_scatter"),
    "all_to_all": Op("coll", "input_tensor_list", uneven=True, out="output_tensor_list"),
    "all_to_all_single": Op("coll", "input", uneven=True, out="output"),
    "broadcast": Op("coll", "tensor", "src", synced=True),
    "reduce": Op("coll", "tensor", "dst", redop="op"),
    "gather": Op("coll", "tensor", "dst", uneven=True),
    "scatter": Op("coll", "tensor", "src", uneven=True),
    "barrier": Op("coll"),
    "monitored_barrier": Op("coll"),
    "all_gather_object": Op("coll", objects=("obj", "object_list"), synced=True),
    "gather_object": Op("coll", None, "dst", default_root=0, objects=("obj", "object_gather_list")),
    "broadcast_object_list": Op("coll", None, "src", default_root=0, objects=(None, "object_list"), synced=True),
    "scatter_object_list": Op("coll", None, "src", default_root=0, objects=(None, "scatter_object_output_list")),
    "send": Op("p2p", "tensor", "dst", direction="send"),
    "recv": Op("p2p", "tensor", "src", direction="recv"),  # no src: from any rank
    "isend": Op("p2p", "tensor", "dst", returns_work=True, direction="send"),
    "irecv": Op("p2p", "tensor", "src", returns_work=True, direction="recv"),
    "send_object_list": Op("p2p", None, "dst", direction="send"),
    "recv_object_list": Op("p2p", None, "src", direction="recv"),
    "batch_isend_irecv": Op("p2p", returns_work=True),
    "init_process_group": Op("init"),
    "new_group": Op("new_group"),
    "new_subgroups": Op("local"),
    "new_subgroups_by_enumeration": Op("local"),
    "destroy_process_group": Op("local"),
}

COLLECTIVES = frozenset(n for n, o in OPS.items() if o.kind == "coll")
SENDS = frozenset(n for n, o in OPS.items() if o.direction == "send")
RECVS = frozenset(n for n, o in OPS.items() if o.direction == "recv")
UNEVEN = frozenset(n for n, o in OPS.items() if o.uneven)
OBJECT_COLLECTIVES = frozenset(n for n, o in OPS.items() if o.objects)
SYNCED = frozenset(n for n, o in OPS.items() if o.synced)
ALL_GATHERS = frozenset(n for n, o in OPS.items() if o.family == "all_gather")
REDUCE_SCATTERS = frozenset(n for n, o in OPS.items() if o.family == "reduce_scatter")
# the fields of a call that must match across ranks, which a `wait` copies from the asynchronous call it waits on
MATCH_FIELDS = ("gname", "group", "seq", "root", "shapes", "length", "dtypes", "redop", "splits")

PAIR = "pair"
FULL = "full"
LEVELS = (PAIR, FULL)

# the words for each field that can differ, in the order a sentence names them
FIELDS = ("op", "group", "root", "shape", "list length", "dtype", "reduce op", "splits")


# ----------------------------------------------------------------------------------------------- what a call is

def op_of(p: Mapping) -> str | None:
    """The op a call stands for (a `wait` stands for the op it waits on)."""
    return p.get("of") if p.get("op") == "wait" else p.get("op")


def is_collective(p: Mapping) -> bool:
    """A collective of its group's sequence (`coll`: one the recorder saw that has no public function, e.g.
    `_broadcast_coalesced`'s parts)."""
    return op_of(p) in COLLECTIVES or bool(p.get("coll"))


def p2p_direction(p: Mapping) -> str | None:
    op = op_of(p)
    return "send" if op in SENDS else "recv" if op in RECVS else None


def p2p_ops(p: Mapping) -> list[tuple[str, int | None, int]]:
    """(direction, peer, tag) of each point-to-point op a call made: one for send/recv and their variants, one per
    op of a batch_isend_irecv, none for anything else (a `wait` included: its op was counted when posted)."""
    if p.get("op") == "batch_isend_irecv":
        return [("send" if o.get("op") == "isend" else "recv", o.get("peer"), 0) for o in p.get("p2p") or []]
    if p.get("op") in SENDS or p.get("op") in RECVS:
        return [("send" if p["op"] in SENDS else "recv", p.get("peer"), p.get("tag", 0))]
    return []


def slot(p: Mapping) -> tuple:
    """(group name, sequence number): ranks whose collectives share a slot are in one call."""
    return p.get("gname"), p.get("seq")


# ----------------------------------------------------------------------------------------------- what must match

def _check(level: str) -> None:
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, not {level!r}")


def _canon(v):
    """Lists (from JSON) and tuples (from a caller) of the same values compare equal."""
    if isinstance(v, (list, tuple)):
        return tuple(_canon(x) for x in v)
    return v


def _fields(p: Mapping, level: str) -> dict[str, object]:
    """The per-rank fields that must be equal at `level`, by their word in FIELDS (splits are compared in pairs)."""
    _check(level)
    op = op_of(p)
    out = {"op": op, "group": _canon(p.get("group")), "root": p.get("root"),
           "shape": None if op in UNEVEN else _canon(p.get("shapes")), "list length": p.get("length"),
           "dtype": _canon(p.get("dtypes"))}
    if level == FULL:
        out["reduce op"] = p.get("redop")
    return out


def key(p: Mapping, level: str) -> tuple:
    """What must be equal on every rank at one call, as a hashable value (the relation of `splits` aside: see
    `matches`). Two calls of one slot whose keys differ can never be the same call."""
    return tuple(_fields(p, level).values())


def _splits_agree(a: Mapping, b: Mapping) -> bool:
    """What rank a sends to rank b is what b receives from a, both ways (True where either side is unknown)."""
    sa, sb, group = a.get("splits"), b.get("splits"), a.get("group")
    if not sa or not sb or not group or a.get("rank") is None or b.get("rank") is None:
        return True
    try:
        ia, ib = list(group).index(a["rank"]), list(group).index(b["rank"])
        return sa[0][ib] == sb[1][ia] and sb[0][ia] == sa[1][ib]
    except (ValueError, IndexError, TypeError):  # a rank outside the group or splits of another length: no pair
        return False


def matches(a: Mapping, b: Mapping, level: str) -> bool:
    """Can these two ranks' calls be one call, at this level of strictness?"""
    return key(a, level) == key(b, level) and _splits_agree(a, b)


def camps(calls: Mapping[int, Mapping], level: str) -> list[list[int]]:
    """The ranks grouped by what they call (the key at `level`), the largest camp first; where every key is equal
    but the splits disagree, the ranks whose splits disagree with the most peers form a camp of their own."""
    by_key: dict[tuple, list[int]] = {}
    for r, p in sorted(calls.items()):
        by_key.setdefault(key(p, level), []).append(r)
    out = sorted(by_key.values(), key=lambda rs: (-len(rs), rs[0]))
    if len(out) == 1:
        bad = split_culprits(calls)
        if bad and len(bad) < len(calls):
            out = [[r for r in out[0] if r not in bad], bad]
    return out


def odd_ones(calls: Mapping[int, Mapping], level: str) -> list[int]:
    """The ranks that differ: the smallest camp of `camps` (on a tie, the one without the lowest rank); where only
    the splits disagree, the ranks whose splits disagree with the most peers; [] when the calls can be one call."""
    what = disagreements(calls, level)
    if not what:
        return []
    if what == ["splits"]:
        return split_culprits(calls)
    return sorted(min(camps(calls, level), key=lambda rs: (len(rs), -min(rs))))


def split_culprits(calls: Mapping[int, Mapping]) -> list[int]:
    """The ranks whose splits disagree with the most peers ([] when every pair agrees)."""
    wrong = {r: sum(not _splits_agree(p, q) for s, q in calls.items() if s != r) for r, p in calls.items()}
    most = max(wrong.values(), default=0)
    return sorted(r for r, n in wrong.items() if n == most) if most else []


def split_pairs(calls: Mapping[int, Mapping]) -> list[tuple[int, int, int, int]]:
    """(sender, receiver, elements sent, elements the receiver expects from it) for every pair of ranks whose
    splits disagree, in rank order."""
    out = []
    for a, p in sorted(calls.items()):
        for b, q in sorted(calls.items()):
            group = p.get("group")
            if a == b or not p.get("splits") or not q.get("splits") or not group:
                continue
            try:
                ia, ib = list(group).index(a), list(group).index(b)
                sent, expected = p["splits"][0][ib], q["splits"][1][ia]
            except (ValueError, IndexError, TypeError):  # splits of another length: no pair to name
                continue
            if sent != expected:
                out.append((a, b, sent, expected))
    return out


def disagreements(calls: Mapping[int, Mapping], level: str) -> list[str]:
    """The fields (words of FIELDS) that differ across the ranks' calls at this level; [] when they can be one
    call. A root or a reduce op is named only where the op is the same (a different op explains them)."""
    per = [_fields(p, level) for p in calls.values()]
    out = [f for f in FIELDS if f != "splits" and per and f in per[0] and len({repr(x[f]) for x in per}) > 1]
    if "op" in out:  # a different op explains a different root and reduce op (an all_gather has neither)
        out = [f for f in out if f not in ("root", "reduce op")]
    ps = list(calls.values())
    if any(not _splits_agree(a, b) for i, a in enumerate(ps) for b in ps[i + 1:]):
        out.append("splits")
    return out


def signature(p: Mapping) -> str:
    """A call's fields that must match, as the tracer writes them in its `sig` field: `op|root|shapes|dtypes`."""
    return f"{op_of(p)}|{p.get('root')}|{p.get('shapes')}|{p.get('dtypes')}"
