"""One view of a rank: the tracer's track merged with what its Flight Recorder saw (`sandbox.flight` reads the dumps
into calls). How the two lenses become one (`merge`), in one step:

- An entry whose frames pass through the tracer's wrapper is a call the tracer recorded with more than the recorder
  knows (site, root, reduce op, splits, devices): the tracer's event stays, and takes the entry's sequence number.
- Any other entry was made where the tracer cannot see (in C++, or through a private torch function): it becomes a
  call of its own in the rank's track, marked `"lens": "flight"`, with its sequence number, sizes, dtypes, the
  user's line from its frames and the framework call it was made under (`via`: "loss.backward()").
- Sequence numbers are then the backend's, for every group in which some rank made such calls: the k-th collective
  of a group is the same call on every rank whoever made it (a DDP gradient all_reduce and a Python all_reduce
  meet at one number, as they meet in the backend). In groups where every call was a Python call nothing changes.

No torch here.
"""
from __future__ import annotations

import bisect
import itertools
import re

from sandbox import _paths, flight
from sandbox.calls import COLLECTIVES
from sandbox.events import RankTrack
from sandbox.flight import SYNTHETIC_ID, calls, framework_groups


def call_event(c: dict, rank: int, group) -> dict:
    ev = {"ev": "enter", "rank": rank, "id": SYNTHETIC_ID + c["record_id"], "t": c["t"], "op": c["op"],
          "gname": c["gname"], "seq": c["seq"], "site": c["site"], "lens": "flight"}
    for k in ("shapes", "dtypes", "via"):
        if c.get(k):
            ev[k] = c[k]
    if group:
        ev["group"] = group
    if c["op"] not in COLLECTIVES and not c["p2p"]:
        ev["coll"] = True  # a collective torch.distributed has no public function for: still one of its group's calls
    return ev


def _groups_of(t: RankTrack) -> dict[str, list[int]]:
    out = {}
    for ev in t.events:
        if ev.get("gname") and ev.get("group"):
            out.setdefault(str(ev["gname"]), ev["group"])
    return out


def reached_by(fr: dict[int, list[dict]]) -> dict[tuple, set[int]]:
    """(group, seq) -> the ranks that reached that collective: those whose dumps hold it, and those whose dumps hold
    only later ones of its group. A recorder keeps its last entries alone (`flight.BUFFER`): a rank that went on to
    later collectives of a group made this one too, and it fell out of the buffer, which a rank that made one more
    call since fills up to a later point (else the other rank's oldest entry read as a call nobody met)."""
    out: dict[tuple, set[int]] = {}
    first: dict[int, dict[str, int]] = {}  # rank -> group -> its dump's oldest collective of the group
    for r, cs in fr.items():
        for c in cs:
            if not c["p2p"]:
                out.setdefault((c["gname"], c["seq"]), set()).add(r)
                if isinstance(c["seq"], int) and c["seq"] < first.setdefault(r, {}).get(c["gname"], c["seq"] + 1):
                    first[r][c["gname"]] = c["seq"]
    for (g, seq), ranks in out.items():
        if isinstance(seq, int):
            ranks.update(r for r, oldest in first.items() if oldest.get(g, seq) > seq)
    return out


_TB_FRAME = re.compile(r'\s*File "(.+)", line (\d+),? in (\S+)')


def _where_stuck(t: RankTrack) -> tuple[str | None, str | None]:
    """(the user's file:line, the framework call) of where a rank's code is: from its error's traceback (innermost
    frame last) or its stack dump (innermost first), for the recorder's calls of a dump without frames."""
    tb = (t.error or {}).get("traceback")
    if tb:
        frames = [(m.group(1), m.group(3), int(m.group(2))) for m in map(_TB_FRAME.match, tb.splitlines()) if m]
        frames.reverse()
    else:  # the first thread with a frame of the user's (the recorder's own thread has none)
        threads: list[list] = []
        for line in (t.stack or "").splitlines():
            m = _TB_FRAME.match(line)
            if m and threads:
                threads[-1].append((m.group(1), m.group(3), int(m.group(2))))
            elif line and not line[0].isspace():
                threads.append([])
        frames = next((fs for fs in threads if any(not (_paths.is_plumbing(p) or _paths.is_stdlib(p))
                                                   for p, _, _ in fs)), [])
    return flight.site_of(frames) if frames else (None, None)


# ops whose recorder entry carries the same name as the Python call (broadcast_object_list, for one, is made of
# broadcasts, and all_gather_into_tensor is recorded under another name): two of these that differ are two calls
_PLAIN = frozenset({"all_reduce", "broadcast", "barrier", "reduce", "all_gather", "gather", "scatter", "reduce_scatter",
                    "all_to_all"})


# plain calls a backend makes of another one: gloo runs a reduce_scatter of uneven parts as one all_reduce per part
_MADE_OF = frozenset({("reduce_scatter", "all_reduce")})


def _within_traced(c: dict, traced: dict[str, tuple[list, list, list]]) -> bool:
    """Was this entry made while one of the tracer's collectives on its group ran (so it is that call, or a part of
    it)? A plain op of another name is not, unless the backend makes the one of the other (under Join, DDP's
    broadcast of the model came inside the window of a Python all_reduce on a loaded machine, and the calls of the
    group were then numbered wrong). `traced`: `_windows`'; only the windows that start before the entry and may
    still run at its time are looked at (a long run has thousands)."""
    starts, reach, ws = traced.get(c["gname"], ([], [], []))
    j = bisect.bisect_right(starts, c["t"] + 1e-4) - 1
    while j >= 0 and reach[j] >= c["t"] - 1e-4:  # reach: the latest end of window j and every earlier one
        _, _, b, op = ws[j]
        if c["t"] <= b + 1e-4 and (op == c["op"] or op not in _PLAIN or c["op"] not in _PLAIN
                                   or (op, c["op"]) in _MADE_OF):
            return True
        j -= 1
    return False


def _windows(windows: list[tuple[str, float, float, str]]) -> dict[str, tuple[list, list, list]]:
    """(group, start, end, op) windows by group, in start order: their starts, the running latest end, the windows."""
    by: dict[str, list] = {}
    for w in sorted(windows, key=lambda w: w[1]):
        by.setdefault(w[0], []).append(w)
    return {g: ([w[1] for w in ws], list(itertools.accumulate((w[2] for w in ws), max)), ws) for g, ws in by.items()}


def finished_with(fr: dict[int, list[dict]], tracks: dict[int, RankTrack]) -> dict[tuple, set[int]]:
    """(group, seq) -> the ranks that made that collective and then finished (their own code returned): their part
    of it is done, whatever state their dump gives it (gloo's recorder may leave a last call 'scheduled' for good)."""
    out: dict[tuple, set[int]] = {}
    for r, cs in fr.items():
        if tracks[r].end is not None and tracks[r].end.get("outcome") == "ok":
            for c in cs:
                if not c["p2p"]:
                    out.setdefault((c["gname"], c["seq"]), set()).add(r)
    return out


def _merged_events(t: RankTrack, cs: list[dict], renumber: set[str], members: dict[str, list[int]],
                   reached: dict[tuple, set[int]], failed_site: str | None,
                   peers_done: dict[tuple, set[int]] | None = None) -> list[dict]:
    evs = [dict(ev) for ev in t.events]
    exits = {ev["id"]: ev for ev in evs if ev.get("ev") == "exit"}
    traced = [c for c in cs if c["traced"] and not c["p2p"] and c["gname"] in renumber]
    used: set[int] = set()
    new_seq: dict[int, int] = {}  # tracer call id -> the backend's sequence number
    for ev in evs:
        if ev.get("ev") != "enter" or ev.get("op") not in COLLECTIVES or str(ev.get("gname")) not in renumber:
            continue
        end = exits.get(ev["id"], {}).get("t", float("inf"))
        for i, c in enumerate(traced):  # the first entry made while this call ran is its own
            if i not in used and c["gname"] == str(ev.get("gname")) and ev["t"] - 1e-3 <= c["t"] <= end + 1e-3:
                used.add(i)
                new_seq[ev["id"]] = c["seq"]
                ev["pyseq"], ev["seq"] = ev.get("seq"), c["seq"]
                break
    for ev in evs:  # a wait carries the seq of the call it waits on
        if ev.get("op") == "wait" and ev.get("of_id") in new_seq:
            ev["seq"] = new_seq[ev["of_id"]]
    own = [c for c in cs if not c["traced"] and not c["p2p"]]
    finished = t.end is not None and t.end.get("outcome") == "ok"
    for k, c in enumerate(own):
        group = members.get(c["gname"])
        peers = [m for m in (group or ()) if m != t.rank]
        met = all(m in reached.get((c["gname"], c["seq"]), {m}) for m in peers)  # a peer's dump without it: not met
        # made by every peer, which then finished: it cannot hold this rank (once a peer has exited, a call still
        # open reads as one nobody can complete), though its own entry may still say 'scheduled': gloo's recorder
        # left a DDP job's last gradient all_reduce so, for seconds, while the rank ran its own code after it
        theirs = bool(peers) and all(m in (peers_done or {}).get((c["gname"], c["seq"]), ()) for m in peers)
        done = finished or (c["state"] == "completed" and met) or theirs
        if k == len(own) - 1 and not done and c["site"] is None:
            # a dump without frames: the rank's last open call is where it is stuck, or where it failed
            c["site"], c["via"] = _where_stuck(t)
        evs.append(call_event(c, t.rank, group))
        if k == len(own) - 1 and not done and failed_site and c["site"] == failed_site:
            evs.append({"ev": "exit", "rank": t.rank, "id": SYNTHETIC_ID + c["record_id"], "op": c["op"],
                        "t": c["t"] + 1e-6, "error": "the rank's error was raised in this call"})
        elif done:
            evs.append({"ev": "exit", "rank": t.rank, "id": SYNTHETIC_ID + c["record_id"], "op": c["op"],
                        "t": c["t"] + 1e-6})
    evs.sort(key=lambda e: (e.get("t", 0), e.get("ev") != "hello"))
    return evs


def _rebuilt(t: RankTrack, evs: list[dict]) -> RankTrack:
    n = RankTrack(t.rank)
    for ev in evs:
        n.feed(ev)
    n.pid, n.exit_code, n.exit_t, n.stack = t.pid, t.exit_code, t.exit_t, t.stack
    n.ended_by_sandbox = t.ended_by_sandbox
    return n


def _by_backend_seq(t: RankTrack, renumber: set[str]) -> RankTrack:
    """A rank that left no dump (it crashed): its calls in a group a framework used too take the group's own
    sequence number, which the tracer read before each call, so they meet the others' recorded calls where the
    backend paired them."""
    evs = [dict(ev) for ev in t.events]
    new_seq = {ev["id"]: ev["cseq"] + 1 for ev in evs if ev.get("ev") == "enter" and isinstance(ev.get("cseq"), int)
               and str(ev.get("gname")) in renumber}
    if not new_seq:
        return t
    for ev in evs:
        if ev.get("ev") == "enter" and ev.get("id") in new_seq:
            ev["pyseq"], ev["seq"] = ev.get("seq"), new_seq[ev["id"]]
        elif ev.get("op") == "wait" and ev.get("of_id") in new_seq:  # a wait carries the seq of its call
            ev["seq"] = new_seq[ev["of_id"]]
    return _rebuilt(t, evs)


def merge(tracks: dict[int, RankTrack], dumps: dict[int, dict]) -> dict[int, RankTrack]:
    """The tracer's tracks with what the ranks' recorders saw and the tracer did not (see the module's docstring).
    Tracks are returned unchanged when the recorders saw nothing more; the input is never modified."""
    fr = {r: calls(d, r) for r, d in dumps.items() if r in tracks}
    for r, cs in fr.items():  # a dump without frames: which entries are the tracer's own calls, by their times
        t = tracks[r]
        exits = {ev.get("id"): ev.get("t") for ev in t.events if ev.get("ev") == "exit"}
        windows = _windows([(str(ev.get("gname")), ev["t"], exits.get(ev["id"]) or float("inf"), ev.get("op"))
                            for ev in t.events if ev.get("ev") == "enter" and ev.get("op") in COLLECTIVES])
        for c in cs:
            if c["traced"] is None:
                c["traced"] = _within_traced(c, windows)
    renumber = framework_groups(fr)
    if not renumber:
        return tracks
    members: dict[str, list[int]] = {}
    for t in tracks.values():
        for g, rs in _groups_of(t).items():
            members.setdefault(g, rs)
    reached, peers_done = reached_by(fr), finished_with(fr, tracks)
    out = {}
    for r, t in tracks.items():
        if r not in fr:
            out[r] = _by_backend_seq(t, renumber)
            continue
        failed_site = (t.error or {}).get("site")
        out[r] = _rebuilt(t, _merged_events(t, fr[r], renumber, members, reached, failed_site, peers_done))
    return out
