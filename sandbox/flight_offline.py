"""Dumps alone, offline: the tracks of a job with no sandbox in it, built from its PyTorch Flight Recorder dumps (the
calls `sandbox.flight` reads from them), for `python -m sandbox.diagnose DIR`. No torch here.
"""
from __future__ import annotations

import json

from sandbox import flight, flight_view
from sandbox.events import RankTrack


def world_size(dumps: dict[int, dict]) -> int:
    """The job's world size as far as the dumps tell: the default group's ranks in `pg_config` where a dump lists
    them, else the highest rank that left a dump, plus one."""
    n = max(dumps) + 1 if dumps else 0
    for d in dumps.values():
        for cfg in (d.get("pg_config") or {}).values():
            try:
                ranks = json.loads(cfg.get("ranks", "[]")) if isinstance(cfg, dict) else []
            except (ValueError, TypeError, AttributeError):  # a form of pg_config this reader does not know
                continue
            if isinstance(ranks, list) and ranks and all(isinstance(r, int) for r in ranks):
                n = max(n, max(ranks) + 1)
    return n


def tracks_from_dumps(dumps: dict[int, dict], unreadable=()) -> dict[int, RankTrack]:
    """Offline, from dumps alone (a job with no sandbox in it): each rank's calls as its track. A rank whose calls
    all completed is taken as finished; one with a call its peers never reached, or that never completed, is inside
    it. A rank without a dump is marked so (`no_dump`): it finished, or died before it could write one; so is a rank
    of `unreadable`, whose dump is there but cannot be read (`no_dump: "unreadable"`)."""
    fr = {r: flight.calls(d, r) for r, d in dumps.items()}
    world = list(range(max([world_size(dumps)] + [r + 1 for r in unreadable])))
    members: dict[str, list[int]] = {}
    for r, cs in fr.items():
        for c in cs:
            members.setdefault(c["gname"], set()).add(r)
    members = {g: (world if g == "0" else sorted(rs)) for g, rs in members.items()}
    reached = flight_view.reached_by(fr)
    tracks = {}
    for r, cs in fr.items():
        t = RankTrack(r)
        t.feed({"ev": "hello", "rank": r, "t": cs[0]["t"] if cs else 0, "world_size": len(world), "lens": "flight"})
        evs = []
        for c in cs:
            ev = flight_view.call_event(c, r, members.get(c["gname"]) if not c["p2p"] else None)
            if c["p2p"]:
                ev["op"] = {"send": "send", "recv": "recv"}.get(c["op"], c["op"])
            evs.append(ev)
            group = members.get(c["gname"]) or []
            met = all(m in reached.get((c["gname"], c["seq"]), set()) or m not in fr for m in group)
            if c["state"] == "completed" and met:
                evs.append({"ev": "exit", "rank": r, "id": ev["id"], "op": c["op"], "t": c["t"] + 1e-6})
        for ev in evs:
            t.feed(ev)
        if t.pending is None:
            t.feed({"ev": "end", "rank": r, "outcome": "ok", "t": (cs[-1]["t"] if cs else 0) + 2e-6,
                    "dump_done": True})  # every call in its dump completed: whether it then finished, no dump says
        tracks[r] = t
    for r in world:
        if r not in tracks:
            no_dump = "unreadable" if r in unreadable else True
            t = tracks[r] = RankTrack(r)
            t.feed({"ev": "hello", "rank": r, "t": 0, "world_size": len(world), "lens": "flight", "no_dump": no_dump})
            t.feed({"ev": "end", "rank": r, "outcome": "ok", "t": 0, "no_dump": no_dump})
    return tracks
