"""This rank's trace file and the state every part of the tracer shares: where lines go (`fd`), the rank, the
call ids, and what the current thread is inside. Opening the file (`start`) and the rank's last line (`finish`) are
here too; the lines' format is `sandbox.events`'.
"""
from __future__ import annotations

import itertools
import os
import socket
import threading
import time

import torch

from sandbox import events

fd: int | None = None
rank: int | None = None
ids = itertools.count(1)   # call ids; next() is atomic, so two threads never get the same one
lock = threading.Lock()    # an id, a sequence number and the line that carries them are written as one
tls = threading.local()    # per thread: `depth` (inside a traced call), `work` (the Work that call waited on)


def emit(event: dict) -> None:
    """Append one event line to this rank's trace (no-op when the tracer has no sink)."""
    if fd is None:
        return
    event.setdefault("t", time.time())
    os.write(fd, events.encode(event))


def note(fields: dict) -> None:
    """A fact the rank's own code records (`sandbox.lab.note`): a `note` event, read back in the parent. Outside
    a traced rank there is no trace to write it to, and it is dropped."""
    emit({"ev": "note", "rank": rank, "t": time.time(), "fields": fields})


def write(line: bytes) -> None:
    """Append one line the caller has already encoded (the tracer's fast path)."""
    os.write(fd, line)


def set_sink(new_fd: int | None) -> int | None:
    """Write this rank's events to `new_fd` from now on (None: record nothing); returns the previous sink.
    For measuring the tracer's own cost with the trace going to /dev/null (benchmarks/core.py)."""
    global fd
    old, fd = fd, new_fd
    return old


def start(path: str, rank_: int, **meta) -> None:
    """Write the trace directory's meta.json, open this rank's trace file and write its first event."""
    global fd, rank
    rank = rank_
    events.write_meta(os.path.dirname(os.path.abspath(path)), torch=torch.__version__,
                      world_size=meta.get("world_size"))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    emit({"ev": "hello", "rank": rank, "pid": os.getpid(), "host": socket.gethostname(),
          "torch": torch.__version__, "format": events.FORMAT_VERSION, **meta})


def finish(outcome: str, **fields) -> None:
    """The rank's last event: how its own code ended (a crash writes none)."""
    emit({"ev": "end", "rank": rank, "outcome": outcome, **fields})
