"""The mismatch rules: ranks that disagree about the rendezvous (`init_mismatch`), about the process groups they
create (`group_mismatch`), or about the collective they make at one call of a group (`bucket_mismatch`). What must
be the same at one call is `sandbox.calls`' to say (FULL level: op, group, root, shapes, dtypes, reduce op,
splits); this module names who differs and where they came from.
"""
from __future__ import annotations

from sandbox import branches, calls, words
from sandbox.calls import is_collective, op_of
from sandbox.diagnose import origins, positions
from sandbox.events import RankTrack
from sandbox.result import Diagnosis, Kind


def minority(groups: dict) -> list[int]:
    """Ranks of the smallest camp; on a tie the camp without the lowest rank."""
    camps = sorted(groups.values(), key=lambda rs: (len(rs), -min(rs)))
    return sorted(camps[0])


def init_mismatch(tracks) -> Diagnosis | None:
    seen = {}
    for t in tracks.values():
        if t.inits:
            p = t.inits[-1]
            seen.setdefault((p.get("endpoint"), p.get("world_size")), []).append(t.rank)
    if len(seen) < 2:
        return None
    # the launcher's endpoint (MASTER_ADDR:MASTER_PORT) is the right one: the others are the culprits
    launcher = None
    for t in tracks.values():
        for p in t.inits:
            if p.get("MASTER_PORT"):
                host = p.get("MASTER_ADDR") if p.get("MASTER_ADDR") not in ("localhost",) else "127.0.0.1"
                launcher = f"{host}:{p['MASTER_PORT']}"
    culprits = [r for (ep, _), rs in seen.items() if ep != launcher for r in rs] if launcher else []
    if not culprits or len(culprits) == sum(len(v) for v in seen.values()):
        culprits = minority(seen)
    parts = [f"{words.ranks(rs)} at {ep} (world size {ws}, {tracks[rs[0]].inits[-1].get('init_method')})"
             for (ep, ws), rs in seen.items()]
    p = tracks[culprits[0]].inits[-1]
    return Diagnosis(kind=Kind.INIT_MISMATCH,
                     cause="The ranks disagree on the rendezvous, so they can never meet: " + "; ".join(parts) +
                     (f". The launcher's endpoint is {launcher} (MASTER_ADDR:MASTER_PORT);"
                      f" {words.ranks(culprits)} {'uses' if len(culprits) == 1 else 'use'} another"
                      f" ({p.get('init_method')} at {p.get('site')})." if launcher else "."),
                     culprit_ranks=culprits, op="init_process_group", seq=0, site=p.get("site"),
                     details={"endpoints": {f"{ep} ws={ws}": rs for (ep, ws), rs in seen.items()}, "launcher": launcher})


def group_mismatch(tracks, strict: bool, excused=()) -> Diagnosis | None:
    """Ranks that created different groups, or in another order. `excused`: ranks cut off while connecting, in
    init_process_group or a new_group, as peers that had got through it left (`connect.victims`): their groups end
    where they were cut off, so a later group they never reached is not one they created otherwise (cut off in
    init_process_group, they made none)."""
    hist = {r: [tuple(g["ranks"]) if isinstance(g.get("ranks"), list) else ("all",) for g in t.new_groups
                if not g.get("local_sync")]  # groups made with use_local_synchronization involve only members
            for r, t in tracks.items() if t.hello is not None or t.events}
    if not hist:
        return None
    longest = max(len(h) for h in hist.values())
    for k in range(longest):
        at = {r: (h[k] if k < len(h) else None) for r, h in hist.items() if k < len(h) or r not in excused}
        camps: dict = {}
        for r, g in at.items():
            camps.setdefault(g, []).append(r)
        if len(camps) < 2:
            continue
        if None in camps and not strict and len(camps) == 2:
            continue  # some ranks simply have not created this group yet
        culprits = minority(camps)
        # every rank created only a group it belongs to (`new_group(my_replicas)`): each camp is wrong alike
        own = (None not in camps and all(set(rs) <= set(g) for g, rs in camps.items())
               and sum(len(set(g)) for g in camps) == len(set().union(*map(set, camps))))  # disjoint groups
        if own:
            culprits = sorted(r for rs in camps.values() for r in rs)
        describe = "; ".join(
            (f"{words.ranks(rs)} created {list(g)}" if g is not None else f"{words.ranks(rs)} never made this call")
            for g, rs in camps.items())
        if own:
            describe += (". Each rank created only a group it belongs to: new_group is collective over the whole"
                         " world, so every rank must create every group, its own and the others', in one order,"
                         " keeping the one it is in")
        site = next((tracks[r].new_groups[k].get("site") for r in culprits if k < len(tracks[r].new_groups)), None)
        return Diagnosis(kind=Kind.GROUP_MISMATCH,
                         cause=words.groups_differ(k + 1, describe) +
                         " Every rank must call every new_group, with the same ranks, in the same order"
                         " (group names come from that order), so these groups never connect.",
                         culprit_ranks=culprits, op="new_group", seq=k + 1, site=site,
                         details={"index": k + 1, "camps": {str(g): rs for g, rs in camps.items()}})
    return None


def bucket_mismatch(tracks, pend: dict[int, dict]) -> Diagnosis | None:
    """Ranks at the same call of the same group, calling different things (anything `calls` says must match)."""
    buckets: dict = {}
    for r, p in pend.items():
        if is_collective(p):
            buckets.setdefault(calls.slot(p), {})[r] = p
    # also ranks that already passed this call (a crash ends one side early): use their recorded event
    for key, members in buckets.items():
        group = next(iter(members.values())).get("group")
        for r, t in tracks.items():
            if r not in members and key in t.by_bucket and t.by_bucket[key].get("group") == group:
                members[r] = t.by_bucket[key]
    for (gname, seq), members in sorted(buckets.items(), key=lambda kv: min(p["t"] for p in kv[1].values())):
        what = calls.disagreements(members, calls.FULL)
        if not what or "group" in what:
            continue  # the same call, or different memberships: a group mismatch, named elsewhere
        camps = calls.camps(members, calls.FULL)
        culprits = calls.odd_ones(members, calls.FULL)
        sites = {}
        for r, q in sorted(members.items()):
            sites.setdefault(q.get("site"), []).append(r)
        if what == ["splits"] and len(sites) > 1:  # the same op from different lines: the lines are the camps
            camps = sorted(sites.values(), key=lambda rs: (-len(rs), rs[0]))
            culprits = sorted(min(camps, key=lambda rs: (len(rs), -min(rs))))
        ex = members[culprits[0]]
        full = "reduce op" in what
        # splits differ per rank even where they pair up: then each rank says its own
        said_by = [[r] for r in sorted(members)] if "splits" in what else sorted(camps, key=len, reverse=True)
        parts = [f"{words.ranks(rs)} {'calls' if len(rs) == 1 else 'call'} {words.signature(members[rs[0]], full)}"
                 f" at {members[rs[0]].get('site')}" for rs in said_by]
        if what == ["splits"]:  # name the pairs: who sends how much to whom, and what that peer expects
            pairs = calls.split_pairs(members)
            parts = ["; ".join(f"rank {r} calls {words.signature(members[r], full)} at {members[r].get('site')}"
                               for r in culprits) + ": "
                     + "; ".join(f"rank {a} sends {n} element{'s' if n != 1 else ''} to rank {b}, which expects {m}"
                                 for a, b, n, m in pairs if a in culprits or b in culprits)]
        branch = rank_branch_of(camps, members, tracks)
        skipped = None if branch else _skipped(members, culprits, tracks, gname, seq)
        if skipped is not None:
            return skipped
        handed = None
        if branch is None and what != ["splits"]:  # no branch says who went off: the one whose call only it makes
            culprits = _off_path(camps, members, tracks) or culprits
            for rs in sorted(camps, key=lambda rs: (rs != culprits, len(rs))):
                handed = branches.registered_where(members[rs[0]].get("site"))
                if handed is not None:  # a callback, hook or object that only some ranks were given
                    culprits = sorted(rs)
                    break
            ex = members[culprits[0]]
        done = sorted(r for r in members if tracks.get(r) is not None and tracks[r].passed.get((gname, seq)))
        if what == ["splits"]:  # only the ranks that received a wrong amount hold wrong data
            done = [r for r in done if r in {b for _, b, _, _ in calls.split_pairs(members)}]
        wrong = (f" {words.ranks(done).capitalize()} completed this call against the others: what"
                 f" {'it holds' if len(done) == 1 else 'they hold'} from it is wrong."
                 if done and len(done) < len(members) and what != ["reduce op"] else "")
        if branch and branch["taken"] == "if" and 2 * len(branch["ranks"]) <= len(members):
            # the ones that took a rank-dependent `if` into this call differ, unless they are the many: then the
            # few that skipped it are the odd ones (an empty shard that skips an all_reduce everyone else makes)
            culprits = branch["ranks"]
        return Diagnosis(kind=Kind.COLLECTIVE_MISMATCH,
                         cause=f"Collective mismatch at call #{seq} of group {ex.get('group')}: " + "; ".join(parts) +
                         f". {_rule(what)}"
                         + (f" {branch['words']}" if branch else "") + _handed_words(handed, culprits, members)
                         + wrong
                         + (f" {origins.advice(branch)}" if branch and "reads" in branch else ""),
                         culprit_ranks=culprits, op=op_of(ex), group=ex.get("group"), seq=seq, site=ex.get("site"),
                         details={"calls": {str(r): words.call(p) for r, p in sorted(members.items())},
                                  "differs_in": what, **({"wrong_data": done} if wrong else {}),
                                  **({"branch": {k: v for k, v in branch.items() if k != "words"}} if branch else {})})
    return None


def _handed_words(h: dict | None, culprits: list[int], members: dict[int, dict]) -> str:
    """Where the odd ranks' call comes from when only they were given what makes it (branches.registered_where)."""
    if h is None:
        return ""
    p = members[culprits[0]]
    maker = f"`{h['func']}` of `{h['what']}`" if h["func"] != h["what"] else f"`{h['what']}`"
    return (f" {words.ranks(culprits).capitalize()}'s {op_of(p)} at {p.get('site')} is made by {maker}, which the"
            f" program hands over only under `if {h['test']}:` at {h['if_site']} (`{h['handed']}` at {h['site']}):"
            f" the other ranks never make that call. Give every rank the same callbacks, hooks and plugins, or keep"
            f" their collectives out of the training group (a group of their own, made on every rank).")


def _off_path(camps: list[list[int]], members: dict[int, dict], tracks) -> list[int] | None:
    """Among the smallest camps, when several are as small (two ranks of two, two of four), the one whose call the
    other camps' ranks never made, before this call or at it: a call only some ranks make (a callback or hook
    registered on them, a thread of theirs), off the path the others walk, where the others' call is one it made too.
    None unless exactly one camp is so."""
    small = min(len(rs) for rs in camps)
    if sum(len(rs) == small for rs in camps) < 2:
        return None

    def made(r: int, site) -> bool:
        t = tracks.get(r)
        return t is not None and any(ev.get("ev") == "enter" and ev.get("site") == site for ev in t.events)
    off = [rs for rs in camps if not any(made(m, members[rs[0]].get("site")) for other in camps if other is not rs
                                         for m in other)]
    return sorted(off[0]) if len(off) == 1 and len(off[0]) == small else None


def _skipped(members: dict[int, dict], culprits: list[int], tracks, gname, seq: int) -> Diagnosis | None:
    """The odd ranks did not make a different call at this point: they skipped the one their peers are in. Their
    own call is one the peers made earlier in this group (same line, same call: they went round again) or one
    further on in the same file, and a statement before the peers' call can take a rank past it (`continue`,
    `break`, `return` or `raise` under an `if`, an exception caught around it: `branches.early_exit`). Named as
    ranks missing from the peers' call, with that statement; None where either is not so."""
    others = sorted(set(members) - set(culprits))
    if not others or not isinstance(seq, int):
        return None
    mine, theirs = members[culprits[0]], members[others[0]]
    t = tracks.get(others[0])

    def same(p):
        return (p.get("site"), calls.signature(p)) == (mine.get("site"), calls.signature(mine))
    before = sorted(k[1] for k, p in (t.by_bucket.items() if t is not None else ())
                    if k[0] == gname and isinstance(k[1], int) and k[1] < seq and same(p))
    here, there = branches.site_frame(mine.get("site")), branches.site_frame(theirs.get("site"))
    further = bool(here and there and here[0][0] == there[0][0] and here[0][1] > there[0][1])
    # a rank that left by `break` left the loop its peers are in: a collective mismatch, as the catalogue's
    # aux-data bug and lab 08 document it (`rank_branch_of` names the `if` where it reads the rank's data)
    exit_ = branches.early_exit(theirs.get("site"), without=("break",)) if before or further else None
    if exit_ is None or (exit_["stmt"] == "if" and not further):  # an `if` around the call: only a rank past it
        return None
    group, op = theirs.get("group"), op_of(theirs)
    who, peers = words.ranks(culprits), words.ranks(others)
    one = len(culprits) == 1
    where_mine = f"the call {peers} made as #{before[-1]}" if before else "further on in the program"
    cause = (f"{who} skipped a call {'its' if one else 'their'} peers make: {peers} "
             f"{'waits' if len(others) == 1 else 'wait'} in {op} #{seq} of group {group} ({words.signature(theirs)} "
             f"at {theirs.get('site')}), while {who}'s call #{seq} is {words.signature(mine)} at {mine.get('site')}, "
             f"{where_mine}: {'it' if one else 'they'} had gone on past theirs. "
             + (f"The {op} at {theirs.get('site')} sits under `if {exit_['test']}:` at {exit_['site']}: a rank for "
                "which that is false skips the call its peers make." if exit_["stmt"] == "if" else
                f"{branches.exit_words(exit_)} before the {op} at {theirs.get('site')}: a rank that takes it skips "
                "the call its peers make.")
             + " Every rank "
             "must make the same collectives: let every rank make the call (with a zero or empty contribution) "
             "rather than skip it.")
    return Diagnosis(
        kind=Kind.MISSING_RANKS, cause=cause[0].upper() + cause[1:],
        culprit_ranks=culprits, op=op, group=group, seq=seq, site=theirs.get("site"),
        details={"calls": {str(r): words.call(p) for r, p in sorted(members.items())}, "skipped": words.call(theirs),
                 "made_as": before[-1] if before else None, "exit": exit_})


def _previous_site(t: RankTrack | None, p: dict) -> str | None:
    """The site of the call this rank made just before this one (any group), or None."""
    before = [ev.get("site") for ev in (t.events if t is not None else []) if ev.get("ev") == "enter"
              and ev.get("site") and ev.get("t", 0) < p.get("t", 0)]
    return before[-1] if before else None


def _rule(what: list[str]) -> str:
    """What the ranks broke, in words: 'The op/shape must be the same on every rank of the group.'"""
    same = [f for f in what if f != "splits"]
    out = [f"The {'/'.join(same)} must be the same on every rank of the group."] if same else []
    if "dtype" in what and "op" not in what:  # the same call in two precisions: how that comes about, the ways out
        out.append("A dtype differs where the ranks compute in different precisions (autocast, a model or its"
                   " gradients cast to bfloat16 or float16 on some ranks only): give every rank the same precision,"
                   " or cast to one dtype before the call (t.float()); casting the result afterwards is too late.")
    if "splits" in what:
        out.append("What each rank sends to a peer must be what that peer expects to receive from it (the splits).")
    return " ".join(out)


def rank_branch_of(camps: list[list[int]], members: dict[int, dict], tracks: dict[int, RankTrack]) -> dict | None:
    """Ranks that disagree at one call, one camp of them having got there through an `if` that differs by rank
    (read from a hung rank's stack, else from the call's site): on the rank itself (`if rank == 0:`), else on a
    value the rank read from its own data (`if sent_tokens == 0:`, origins.data_branch); or having left a loop the
    others are still in through an `if` on such a value (`if done: break`, origins.data_break); or, with no such
    `if`, making the call in a loop over a container that such an `if` filled (positions.loop_branch): that branch,
    and a sentence saying so."""
    def frames(r):
        t = tracks.get(r)
        return (branches.stack_frames(t.stack if t is not None else None)
                or branches.site_frame(members[r].get("site")))

    def branch(r):
        here = frames(r)
        return (branches.rank_branch(here) or origins.data_branch(here)
                or origins.data_break(here, branches.site_frame(_previous_site(tracks.get(r), members[r]))))

    found = {tuple(rs): branch(rs[0]) for rs in camps}
    for rs in sorted(camps, key=len):  # the fewest first: usually the ones that took the branch
        b = found[tuple(rs)]
        if b is None:
            continue
        others = sorted(set(members) - set(rs))
        if b["taken"] == "break":  # said only where every other rank is still in that loop
            path, first, last = b.pop("loop")
            if not all((f := frames(o)) and f[0][0] == path and first <= f[0][1] <= last for o in others):
                continue
            p = members[rs[0]]
            b["ranks"] = sorted(rs)
            b["words"] = (f"{words.ranks(rs).capitalize()} reached {words.signature(p)} at {p.get('site')} after"
                          f" leaving the loop at `if {b['test']}:` at {b['site']}{origins.because(b)};"
                          f" {words.ranks(others)} {'is' if len(others) == 1 else 'are'} still in it.")
            return b
        other = next((o for k, o in found.items() if k != tuple(rs) and o and o["site"] == b["site"]), None)
        rest = "took its else" if other and other["taken"] != b["taken"] and b["taken"] == "if" else "skipped it"
        p = members[rs[0]]
        b["ranks"] = sorted(rs)
        b["words"] = (f"{words.ranks(rs).capitalize()} reached {words.signature(p)} at {p.get('site')} "
                      f"{branches.through(b)}")
        if "reads" not in b:  # on the rank: the wording every rank-dependent branch has had
            b["words"] += f"; {words.ranks(others)} {rest}."
        else:
            b["words"] += (f"{origins.because(b)}; {words.ranks(others)} {rest}, so {words.ranks(rs)}"
                           f" made {words.a(op_of(p))} that {words.ranks(others)} did not.")
        return b
    for rs in sorted(camps, key=len):  # no `if` around the call: a loop around it with more rounds on some ranks
        b = positions.loop_branch(frames(rs[0]))
        if b is not None:
            p = members[rs[0]]
            b["ranks"] = sorted(rs)
            b["words"] = (f"{words.ranks(rs).capitalize()} made {words.signature(p)} at {p.get('site')} in the loop"
                          f" at {b['loop']} over `{b['container']}`, which has more rounds on some ranks:"
                          f" {positions.filled_words(b)}{origins.because(b)}.")
            return b
    return None
