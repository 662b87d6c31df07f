"""PyTorch's Flight Recorder, the second lens: every collective a process group made, the ones frameworks make in
C++ included (DDP's gradient all_reduce in its reducer, its coalesced broadcasts), read into the calls of
`sandbox.calls` so the one judge (`sandbox.policy`) rules on them. No torch here: the parent and the offline reader
use it.

A dump is what `torch._C._distributed_c10d._dump_fr_trace()` returns (a pickle; torch writes the same on an NCCL
watchdog timeout with `TORCH_NCCL_DUMP_ON_TIMEOUT=1`, to `$TORCH_FR_DUMP_TEMP_FILE<rank>`): a dict with `version`
("2.x"), `pg_config`, `pg_status` and `entries`, each entry one collective or point-to-point op with its process
group, `collective_seq_id`, `profiling_name` ("gloo:all_reduce", "nccl:all_reduce_barrier"), input sizes and dtypes,
its state and the Python frames of the call. This module reads dumps into calls; how the two lenses become one
view is `sandbox.flight_view.merge`'s.

Offline, `sandbox.flight_offline.tracks_from_dumps` builds the tracks from dumps alone (a job with no sandbox in
it), with the same calls.
"""
from __future__ import annotations

import json
import os
import pickle
import re

from sandbox import _paths, rundir

ENV = "TORCH_FR_BUFFER_SIZE"      # torch records when this is set (gloo and NCCL)
BUFFER = "2000"                   # the sandbox's ranks keep the last 2000 calls
OFF = "SANDBOX_FLIGHT"            # "0": the sandbox leaves the recorder off in its ranks
PREFIX = "nccl_trace_rank_"       # torch's default file prefix for dumps (TORCH_FR_DUMP_TEMP_FILE)
RUN_FILE = rundir.FLIGHT           # a sandbox rank's own dump in its run directory
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
    if not raw:  # what a rank that died while writing its dump leaves
        raise FlightError(f"{path} is empty (0 bytes).")
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


def load_each(paths: dict[int, str]) -> tuple[dict[int, dict], dict[int, str]]:
    """(rank -> dump, rank -> why its file cannot be read, one sentence naming the file without its directory) of
    the dumps `find` found: one rank's torn or empty dump leaves the others readable."""
    dumps, unreadable = {}, {}
    for r, path in sorted(paths.items()):
        try:
            dumps[r] = load(path)
        except FlightError as e:
            unreadable[r] = str(e).replace(path, os.path.basename(path)).rstrip(".")
    return dumps, unreadable


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


def site_of(frames) -> tuple[str | None, str | None]:
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


def retired(e: dict) -> bool:
    """Has the backend finished this entry, by the entry itself? Its state says so (NCCL, from its events), or the
    recorder retired it: gloo's worker thread retires each entry right after running it."""
    return e.get("state") == "completed" or e.get("retired") is True


def _completed(e: dict, status: dict) -> bool:
    """Has the backend finished this entry: `retired`, or (an older dump without the flag) its group's count is past
    it. The count alone can lie: two gloo worker threads each write it after their call, and one that runs late
    overwrites a later call's number with its own, which then stays behind until the next call (torch's
    ProcessGroupGloo::runLoop; seen 9 times in 2000 checked calls under load, torch 2.13 CPU)."""
    if retired(e):
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
        site, via = site_of(frames)
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
