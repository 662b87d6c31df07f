"""The trace format: writing it and reading it back (one rank's state built from it is `sandbox.track`'s,
re-exported here). No torch here: the parent and `sandbox.diagnose` read traces without importing it.

A trace directory holds, per rank, `rank-<R>.jsonl` (events, one JSON object a line, appended with O_APPEND so
lines from one rank never interleave) and `stack-<R>.txt` (a faulthandler dump, written when the rank is asked for
its stack or ended by torchrun's SIGTERM). `meta.json` names the format and its version:

    {"format": "dist-sandbox-trace", "version": 1, ...}

`sandbox.diagnose DIR` refuses a directory of another version, as PyTorch's flight-recorder analyser does.

Events (every one has "ev", "rank" and "t", seconds since the epoch):

- `hello`: the rank started tracing. `pid`, `host`, `torch` (version), `format` (FORMAT_VERSION), `world_size`,
  `local_rank`, `flight` (its Flight Recorder is on and dumped on SIGUSR2: `sandbox.trace.recorder`); under
  torchrun also `group_rank` and `launcher`.
- `enter`: a torch.distributed call starts. Written before the call can block, so it survives a hang or a kill.
  - `id`: the call's number in this rank, unique and increasing (also across threads).
  - `op`: the function called (`all_reduce`, `send`, ..., or `wait` for `Work.wait()` on an async op).
  - `site`: `file:line` of the user's call (the first frame outside torch and the sandbox), `func` its function.
    The file is shown relative to the project when it is the project's, else to the working directory when below
    it, else absolute (`sandbox._paths.shown_path`).
  - `group`: the global ranks of the process group; `gname`: the group's name (PyTorch's
    `_get_process_group_name`), which tells apart two groups with the same ranks.
  - `seq`: collectives only: the call's 1-based number among this rank's collectives on `gname`. Ranks at the same
    `(gname, seq)` must be making the same call.
  - `sig`: collectives only: `op|root|shapes|dtypes`, a summary for people (`sandbox.calls.signature`); what must
    be equal on every rank at one `(gname, seq)` is decided by `sandbox.calls` from the fields themselves.
  - `shapes`, `dtypes`, `devices`: this rank's contribution (one entry per tensor).
  - `redop`: the reduce op of a reducing collective ("SUM", "MAX", ...).
  - `splits`: all_to_all and all_to_all_single: `[sent, received]`, elements sent to and received from each member
    of the group, in group-rank order.
  - `root`: the src/dst of a rooted collective (broadcast, reduce, gather, scatter, *_object); `peer`: the other
    rank of a point-to-point op; `tag`: a point-to-point tag other than 0.
  - `internal`: an asynchronous call made by torch's own code (Join's shadow all_reduce), which waits on its Work
    in C++, where the tracer sees no wait.
  - `async`: the call returned a Work to wait on later (isend, irecv, async_op=True); such an op stays posted until
    its `wait`. `p2p`: for `batch_isend_irecv`, each op as `{"op", "peer", "shapes"}`.
  - `wait` events add `of` (the op being waited on), `of_id` (its call id) and, for one op of a
    `batch_isend_irecv`, `of_idx` (its index in that batch); they copy `peer` and the fields that must match
    across ranks (`sandbox.calls.MATCH_FIELDS`: group, seq, root, shapes, dtypes, redop, splits) of `of`.
  - `init_process_group`: `backend`, `init_method`, `endpoint` (host:port it meets at), `world_size`,
    `MASTER_ADDR`, `MASTER_PORT`, `device_id`, `timeout_s`. `new_group`: `ranks` (or "all"), `index` (this rank's
    count of new_group calls), `local_sync` when made with use_local_synchronization.
  - Calls the Flight Recorder saw and the tracer did not (DDP's gradient all_reduce, made in C++) are added to a
    rank's track when a run is judged (`sandbox.flight_view.merge`; they are not written to the trace file): `enter`
    events with `"lens": "flight"`, an `id` above 10**9, `via` (the framework call they were made under, e.g.
    "backward()"), and `coll` where the op has no public function. In a group where such calls exist, `seq` is then
    the backend's sequence number for every call, and a traced call keeps its own count as `pyseq`.
- `exit`: the call with `id` returned (`op` repeated), or raised (`error`: "Type: message"). With `inflight`: it
  returned to Python but is still running on the GPU (NCCL); a `done` event with the same `id` follows when the
  GPU has finished it. Until then the call is still pending.
  An object collective's exit may add `sent_devices` (the devices of the tensors inside the object this rank
  sent) and `got_devices` ({source rank: devices} of the tensors inside what it received).
- `done`: an in-flight call finished on the GPU.
- `end`: the rank's own code ended: `outcome` "ok", "error" (with `error`: `type`, `message`, `traceback`,
  `site`) or "exit" (sys.exit with a non-zero `exit_code`). A rank that is killed writes none.
- `ddp`: a `DistributedDataParallel` is being constructed (written before its constructor runs): `site`, `func`,
  `params` (`[name, shape]` of each parameter it reduces, in its order: the indices its errors name),
  `find_unused` (find_unused_parameters).
- `note`: a fact the rank's own code recorded with `sandbox.lab.note(**fields)` (a lab's rule reads it: "rank 2
  read block 0"): `fields`, the keyword arguments as JSON. Not a call: the hang rule, the contracts and the
  diagnosis pass over it; `RankTrack.notes` keeps them.
- `optim`: a torch.optim optimizer's `step` returned (global pre- and post-step hooks): `start` (when the step
  began; `t` is when it returned), `op` (its class), `site` (where the user called it), `params` (the elements of
  the parameters it steps), `state` and `state_bytes` (the elements and bytes of its per-parameter state tensors,
  the 0-d step counters left out). Not a call; a lab's rule reads it (ZeRO: a rank's optimizer holds the state of
  1/N of the model), and the timeline draws it as compute.
- `tracer_error`: the tracer itself failed to describe a call (`op`, `error`); the call ran untraced. With `id`:
  its bookkeeping failed after call `id` returned; that call's `exit` was written all the same.
"""
from __future__ import annotations

import json
import os
import time

from sandbox import rundir
# the op table and what a call is: `sandbox.calls` decides; re-exported for the readers of tracks
from sandbox.calls import (COLLECTIVES, MATCH_FIELDS, RECVS, SENDS, UNEVEN, is_collective, op_of,  # noqa: F401
                           p2p_direction, p2p_ops)
# one rank's state, built from these events: `sandbox.track`'s; re-exported, as every reader of traces takes it here
from sandbox.track import RankTrack

FORMAT = "dist-sandbox-trace"
FORMAT_VERSION = 1
META_FILE, TRACE_FILE = rundir.META, rundir.TRACE  # the run directory's names are `sandbox.rundir`'s


class FormatError(ValueError):
    """A trace directory written by another version of the format (or not by the sandbox)."""


# ----------------------------------------------------------------------------------------------- writing

def encode(event: dict) -> bytes:
    """One event as its line."""
    return (json.dumps(event, separators=(",", ":"), default=str) + "\n").encode()


def fragment(fields: dict) -> bytes:
    """Fields of an event as a JSON fragment (no braces), to be cached and spliced into `enter_line`."""
    return json.dumps(fields, separators=(",", ":"), default=str)[1:-1].encode()


_ENTER_HEAD = b'{"ev":"enter"'
_DONE_HEAD = b'{"ev":"done"'
_INFLIGHT = b'"inflight":true'


def enter_line(rank: int, call_id: int, t: float, frag: bytes, seq: int | None = None,
               cseq: int | None = None) -> bytes:
    """The enter event of a call, from its cached static fragment (the tracer's fast path). `cseq` is the group's
    own sequence number before the call (c10d counts a framework's C++ collectives too)."""
    if seq is None:
        return b'%s,"rank":%d,"id":%d,"t":%.6f,%s}\n' % (_ENTER_HEAD, rank, call_id, t, frag)
    if cseq is None:
        return b'%s,"rank":%d,"id":%d,"t":%.6f,"seq":%d,%s}\n' % (_ENTER_HEAD, rank, call_id, t, seq, frag)
    return b'%s,"rank":%d,"id":%d,"t":%.6f,"seq":%d,"cseq":%d,%s}\n' % (_ENTER_HEAD, rank, call_id, t, seq, cseq,
                                                                         frag)


def exit_line(rank: int, call_id: int, op: str, t: float) -> bytes:
    """The exit event of a call that returned."""
    return b'{"ev":"exit","rank":%d,"id":%d,"op":"%s","t":%.6f}\n' % (rank, call_id, op.encode(), t)


def may_block(line: bytes) -> bool:
    """Cheap, without parsing: does this last line of a trace leave its rank inside a call? (After a `done` line,
    see `is_done`, it may: a GPU call finishing says nothing of the calls still in flight after it.)"""
    return line.startswith(_ENTER_HEAD) or _INFLIGHT in line


def is_enter(line: bytes) -> bool:
    """Is this trace line the enter event of a call?"""
    return line.startswith(_ENTER_HEAD)


def is_done(line: bytes) -> bool:
    """Is this trace line a `done` event (an in-flight GPU call finished)?"""
    return line.startswith(_DONE_HEAD)


def write_meta(directory: str, **fields) -> None:
    """Write meta.json (format and version) unless it is there; safe when several ranks race to write it."""
    path = os.path.join(directory, META_FILE)
    if os.path.exists(path):
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"format": FORMAT, "version": FORMAT_VERSION, **fields}, f)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------- reading

def parse(line: bytes | str) -> dict | None:
    """One trace line as an event, or None if it is not one the tracer could have written (a torn last line)."""
    try:
        ev = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(ev, dict) or not isinstance(ev.get("ev"), str) or not isinstance(ev.get("t", 0), (int, float)):
        return None
    if ev["ev"] in ("enter", "exit", "done") and not isinstance(ev.get("id"), int):
        return None
    if ev["ev"] == "enter" and (not isinstance(ev.get("op"), str) or "t" not in ev):
        return None
    return ev


def read_meta(directory: str) -> dict | None:
    """meta.json of a trace directory, checked: None if there is none, FormatError if it is of another version."""
    path = os.path.join(directory, META_FILE)
    try:
        with open(path) as f:
            meta = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise FormatError(f"{path} is not readable JSON ({e}).") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise FormatError(f"{path} does not describe a dist-sandbox trace (no \"format\": \"{FORMAT}\").")
    if meta.get("version") != FORMAT_VERSION:
        raise FormatError(f"{directory} holds traces in format version {meta.get('version')}; this dist-sandbox"
                          f" reads version {FORMAT_VERSION}. Diagnose it with the dist-sandbox that wrote it.")
    return meta


def load_dir(path: str) -> dict[int, "RankTrack"]:
    """Every rank's track from a trace directory (checks meta.json's version first)."""
    read_meta(path)
    tracks: dict[int, RankTrack] = {}
    for name in sorted(os.listdir(path)):
        m = TRACE_FILE.fullmatch(name)
        if not m:
            continue
        t = RankTrack(int(m.group(1)))
        try:
            with open(os.path.join(path, name), "rb") as f:
                for line in f:
                    ev = parse(line)
                    if ev is not None:  # a torn last line of a killed rank, or junk, is skipped
                        t.feed(ev)
        except OSError:
            continue
        t.stack = read_text(rundir.stack(path, t.rank)) or None
        tracks[t.rank] = t
    return tracks


def read_text(path: str, cap: int = 1 << 20) -> str:
    """The last `cap` bytes of a file as text ('' if it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - cap))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


class Tail:
    """Reads the whole lines appended to a file since the last call."""

    def __init__(self, path: str):
        self.path, self.f, self.buf = path, None, b""

    def lines(self) -> list[bytes]:
        if self.f is None:
            try:
                self.f = open(self.path, "rb")
            except FileNotFoundError:
                return []
        data = self.f.read()
        if not data:
            return []
        self.buf += data
        *done, self.buf = self.buf.split(b"\n")
        return done

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None


class DirTail:
    """Every rank's track of a trace directory that ranks are still writing, kept up to date by reading only the
    lines appended since the last look (`load_dir` reads everything again: a long run's watcher would spend its
    time parsing). A rank's file that was replaced (torchrun restarted the workers, and each moved its earlier
    attempt away) is read from its start into a fresh track; one that is gone is dropped. `read[rank]` counts the
    lines read of the rank's files, every attempt's, and each track's `seen_t` says when it was last read to its end."""

    def __init__(self, path: str):
        self.path = path
        self.files: dict[int, tuple[int, Tail, RankTrack]] = {}  # rank -> (inode, its tail, its track)
        self.read: dict[int, int] = {}

    def tracks(self) -> dict[int, RankTrack]:
        """The tracks now, rank by rank (a new dict each time; the tracks themselves are kept and fed)."""
        seen = set()
        for name in os.listdir(self.path):
            m = TRACE_FILE.fullmatch(name)
            if not m:
                continue
            rank, full = int(m.group(1)), os.path.join(self.path, name)
            try:
                inode = os.stat(full).st_ino
            except FileNotFoundError:  # moved away between the listing and now: as if not there yet
                continue
            seen.add(rank)
            known = self.files.get(rank)
            if known is None or known[0] != inode:
                if known is not None:
                    known[1].close()
                known = self.files[rank] = (inode, Tail(full), RankTrack(rank))
            now = time.time()
            lines = known[1].lines()
            known[2].seen_t = now  # read to its end: the track is true at least as of then
            self.read[rank] = self.read.get(rank, 0) + len(lines)
            for line in lines:
                ev = parse(line)
                if ev is not None:  # a torn line of a killed rank, or junk, is skipped
                    known[2].feed(ev)
        for rank in set(self.files) - seen:
            self.files.pop(rank)[1].close()
        return {r: f[2] for r, f in sorted(self.files.items())}

    def close(self) -> None:
        for _, tail, _ in self.files.values():
            tail.close()
        self.files.clear()


def noted_spans(events: list[dict], field: str = "backward") -> dict[int, list[tuple[float, float]]]:
    """{rank: [(start, end), ...]}: the spans a rank's notes mark with `field` "start" then "end" (a build-it
    check's notes around each backward, `sandbox.course.work`), in the order written; one left open is dropped."""
    spans: dict[int, list] = {}
    began: dict[int, float] = {}
    for e in events:
        said = (e.get("fields") or {}).get(field) if e.get("ev") == "note" else None
        if said == "start":
            began[e["rank"]] = e["t"]
        elif said == "end" and e["rank"] in began:
            spans.setdefault(e["rank"], []).append((began.pop(e["rank"]), e["t"]))
    return spans
