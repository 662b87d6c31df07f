"""PyTorch's Flight Recorder, the second lens: every collective a process group made, the ones frameworks make in
C++ included (DDP's gradient all_reduce in its reducer, its coalesced broadcasts), read into the calls of
`sandbox.calls` so the one judge (`sandbox.policy`) rules on them. No torch here: the parent and the offline reader
use it.

A dump is what `torch._C._distributed_c10d._dump_fr_trace()` returns (a pickle; torch writes the same on an NCCL
watchdog timeout with `TORCH_NCCL_DUMP_ON_TIMEOUT=1`, to `$TORCH_FR_DUMP_TEMP_FILE<rank>`): a dict with `version`
("2.x"), `pg_config`, `pg_status` and `entries`, each entry one collective or point-to-point op with its process
group, `collective_seq_id`, `profiling_name` ("gloo:all_reduce", "nccl:all_reduce_barrier"), input sizes and dtypes,
its state and the Python frames of the call. How the two lenses become one (`merge`), in one step:

- An entry whose frames pass through the tracer's wrapper is a call the tracer recorded with more than the recorder
  knows (site, root, reduce op, splits, devices): the tracer's event stays, and takes the entry's sequence number.
- Any other entry was made where the tracer cannot see (in C++, or through a private torch function): it becomes a
  call of its own in the rank's track, marked `"lens": "flight"`, with its sequence number, sizes, dtypes, the
  user's line from its frames and the framework call it was made under (`via`: "loss.backward()").
- Sequence numbers are then the backend's, for every group in which some rank made such calls: the k-th collective
  of a group is the same call on every rank whoever made it (a DDP gradient all_reduce and a Python all_reduce
  meet at one number, as they meet in the backend). In groups where every call was a Python call nothing changes.

Offline, `sandbox.flight_offline.tracks_from_dumps` builds the tracks from dumps alone (a job with no sandbox in
it), with the same calls.
"""
from __future__ import annotations

import json
import os
import pickle
import re

from sandbox import _paths
from sandbox.calls import COLLECTIVES
from sandbox.events import RankTrack

ENV = "TORCH_FR_BUFFER_SIZE"      # torch records when this is set (gloo and NCCL)
BUFFER = "2000"                   # the sandbox's ranks keep the last 2000 calls
OFF = "SANDBOX_FLIGHT"            # "0": the sandbox leaves the recorder off in its ranks
PREFIX = "nccl_trace_rank_"       # torch's default file prefix for dumps (TORCH_FR_DUMP_TEMP_FILE)
RUN_FILE = re.compile(r"fr-(\d+)\.pkl")  # a sandbox rank's own dump in its run directory
SYNTHETIC_ID = 1_000_000_000      # ids of the calls the recorder adds (above any the tracer gives)

# the backend's names for ops, where they are not torch.distributed's function names
_ALIASES = {"all_reduce_barrier": "barrier", "allreduce": "all_reduce", "allgather": "all_gather",
            "_allgather_base": "all_gather_into_tensor", "allgather_into_tensor_coalesced": "all_gather_coalesced",
            "_reduce_scatter_base": "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced": "reduce_scatter",
            "alltoall_base": "all_to_all_single", "alltoall": "all_to_all", "allreduce_coalesced":
            "all_reduce_coalesced", "gather": "gather", "scatter": "scatter", "reduce": "reduce"}
_DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16", "Long": "int64",
           "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
           "ComplexFloat": "complex64", "ComplexDouble": "complex128"}
# torch functions under which a framework makes collectives, as a person would name them
_VIA = (("backward", "_tensor.py", "backward()"), ("backward", "autograd", "backward()"),
        ("__init__", "nn/parallel/distributed.py", "DistributedDataParallel(...)"),
        ("_pre_forward", "nn/parallel/distributed.py", "DDP's forward"),
        ("join", "algorithms/join.py", "Join"), ("fully_shard", "fsdp", "fully_shard"))


class FlightError(ValueError):
    """A dump the sandbox cannot read (not a dump, or a format version it does not know)."""


# ----------------------------------------------------------------------------------------------- reading dumps

def load(path: str) -> dict:
    """One dump (pickle, or torch's JSON form), checked: FlightError with one sentence if it cannot be read."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise FlightError(f"{path} cannot be read ({e.strerror}).") from None
    try:
        dump = pickle.loads(raw)
    except Exception:  # noqa: BLE001  not a pickle: torch also writes JSON (`_dump_fr_trace_json`)
        try:
            dump = json.loads(raw)
        except ValueError:
            raise FlightError(f"{path} is not a Flight Recorder dump (neither a pickle nor JSON).") from None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries", []), list):
        raise FlightError(f"{path} is not a Flight Recorder dump (no list of entries).")
    version = str(dump.get("version", ""))
    if not re.fullmatch(r"2\.\d+", version):
        raise FlightError(f"{path} is a Flight Recorder dump in format version {version or '(none)'}; this"
                          " dist-sandbox reads the 2.x formats that torch 2.11-2.14 write.")
    return dump


def find(directory: str, prefix: str = PREFIX) -> dict[int, str]:
    """rank -> path of each dump `<prefix><rank>` in a directory (torch's naming)."""
    pat = re.compile(re.escape(prefix) + r"(\d+)")
    out = {}
    for name in sorted(os.listdir(directory)):
        m = pat.fullmatch(name)
        if m:
            out[int(m.group(1))] = os.path.join(directory, name)
    return out


def read_run(directory: str) -> dict[int, dict]:
    """The dumps a sandbox run's ranks left in its directory (`fr-<rank>.pkl`); a torn or unreadable one is skipped:
    that rank is judged from its trace alone."""
    out = {}
    for name in os.listdir(directory):
        m = RUN_FILE.fullmatch(name)
        if m:
            try:
                out[int(m.group(1))] = load(os.path.join(directory, name))
            except FlightError:
                continue
    return out


# ----------------------------------------------------------------------------------------------- entries as calls

def _op(profiling_name: str) -> str:
    name = profiling_name.split(":", 1)[-1]
    return _ALIASES.get(name, name)


def _frames(e: dict) -> list[tuple[str, str, int]]:
    return [(f.get("filename", ""), f.get("name", ""), f.get("line", 0)) for f in e.get("frames") or []]


def _site(frames) -> tuple[str | None, str | None]:
    """file:line of the user's innermost frame, and the framework call it made there (`via`)."""
    for i, (path, name, line) in enumerate(frames):
        if not (_paths.is_plumbing(path) or _paths.is_stdlib(path) or path.startswith("<")):
            return f"{_paths.shown_path(path)}:{line}", _via(frames[:i])
    return None, _via(frames)


def _via(inner) -> str | None:
    """The framework function a collective was made under, in the words a person uses."""
    for path, name, _ in reversed(inner):  # the outermost torch frame says most ("backward", DDP's constructor)
        for fn, part, words in _VIA:
            if name == fn and part in path.replace(os.sep, "/"):
                return words
    return None


def _completed(e: dict, status: dict) -> bool:
    if e.get("state") == "completed":
        return True
    if e.get("is_p2p"):
        return False
    last = (status.get(str(e.get("pg_id"))) or {}).get("last_completed_collective", -1)
    return isinstance(last, int) and e.get("collective_seq_id", 0) <= last


def calls(dump: dict, rank: int) -> list[dict]:
    """Every entry of a dump as a call (`sandbox.calls`' fields), oldest first, with what only the recorder says:
    `state` ("completed" or not), `traced` (made through the sandbox's tracer), `via`, `t` (seconds since the epoch)."""
    status = dump.get("pg_status") or {}
    out = []
    for e in sorted(dump.get("entries") or [], key=lambda e: e.get("record_id", 0)):
        frames = _frames(e)
        site, via = _site(frames)
        op = _op(str(e.get("profiling_name", "")))
        pg = e.get("process_group") or (str(e.get("pg_id", "")), "")
        p2p = bool(e.get("is_p2p"))
        c = {"op": op, "rank": rank, "gname": str(pg[0]), "pg_desc": pg[1] if len(pg) > 1 else "",
             "seq": e.get("p2p_seq_id") if p2p else e.get("collective_seq_id"),
             "t": (e.get("time_created_ns") or 0) / 1e9,
             "shapes": [list(s) for s in e.get("input_sizes") or []] or None,
             "dtypes": [_DTYPES.get(d, str(d).lower()) for d in e.get("input_dtypes") or []] or None,
             "site": site, "via": via, "state": "completed" if _completed(e, status) else str(e.get("state")),
             # without frames (the sandbox's own dumps leave them out) `merge` reads it off the tracer's calls
             "traced": any(_paths.is_sandbox(path) and "trace" in path for path, _, _ in frames) if frames else None,
             "record_id": e.get("record_id", 0), "p2p": p2p, "lens": "flight"}
        if op == "barrier":  # gloo's barrier has no tensor, NCCL's is a one-element all_reduce: the same call
            c["shapes"] = c["dtypes"] = None
        out.append(c)
    return out


def framework_groups(fr: dict[int, list[dict]]) -> set[str]:
    """The groups in which some rank made collectives the tracer did not see."""
    return {c["gname"] for cs in fr.values() for c in cs if not c["traced"] and not c["p2p"]}


# ----------------------------------------------------------------------------------------------- one view

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
    """(group, seq) -> the ranks whose dumps hold that collective."""
    out: dict[tuple, set[int]] = {}
    for r, cs in fr.items():
        for c in cs:
            if not c["p2p"]:
                out.setdefault((c["gname"], c["seq"]), set()).add(r)
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
    return _site(frames) if frames else (None, None)


# ops whose recorder entry carries the same name as the Python call (broadcast_object_list, for one, is made of
# broadcasts, and all_gather_into_tensor is recorded under another name): two of these that differ are two calls
_PLAIN = frozenset({"all_reduce", "broadcast", "barrier", "reduce", "all_gather", "gather", "scatter", "reduce_scatter",
                    "all_to_all"})


# plain calls a backend makes of another one: gloo runs a reduce_scatter of uneven parts as one all_reduce per part
_MADE_OF = frozenset({("reduce_scatter", "all_reduce")})


def _within_traced(c: dict, traced: list[tuple[str, float, float, str]]) -> bool:
    """Was this entry made while one of the tracer's collectives on its group ran (so it is that call, or a part of
    it)? A plain op of another name is not, unless the backend makes the one of the other (under Join, DDP's
    broadcast of the model came inside the window of a Python all_reduce on a loaded machine, and the calls of the
    group were then numbered wrong)."""
    return any(g == c["gname"] and a - 1e-4 <= c["t"] <= b + 1e-4
               and (op == c["op"] or op not in _PLAIN or c["op"] not in _PLAIN or (op, c["op"]) in _MADE_OF)
               for g, a, b, op in traced)


def _merged_events(t: RankTrack, cs: list[dict], renumber: set[str], members: dict[str, list[int]],
                   reached: dict[tuple, set[int]], failed_site: str | None) -> list[dict]:
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
        done = finished or (c["state"] == "completed" and met)
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
        windows = [(str(ev.get("gname")), ev["t"], exits.get(ev["id"]) or float("inf"), ev.get("op")) for ev in t.events
                   if ev.get("ev") == "enter" and ev.get("op") in COLLECTIVES]
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
    reached = reached_by(fr)
    out = {}
    for r, t in tracks.items():
        if r not in fr:
            out[r] = _by_backend_seq(t, renumber)
            continue
        failed_site = (t.error or {}).get("site")
        out[r] = _rebuilt(t, _merged_events(t, fr[r], renumber, members, reached, failed_site))
    return out
