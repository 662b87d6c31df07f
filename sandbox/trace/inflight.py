"""NCCL collectives return to Python once enqueued on the GPU stream; until their Work completes they are still
"inside" the collective as far as other ranks are concerned. Such a call's exit is written with "inflight", and a
watcher thread writes "done" when the GPU has finished it, so a stuck NCCL collective stays visible.
"""
from __future__ import annotations

import threading
import time

import torch

from sandbox.trace import sink

pending: dict[int, object] = {}  # call id -> the Work (or stream mark) it waits for
_watcher: threading.Thread | None = None


class StreamMark:
    """Completion of everything queued so far on the current CUDA stream, as a Work-like is_completed()."""

    def __init__(self):
        self.event = torch.cuda.Event()
        self.event.record()

    def is_completed(self) -> bool:
        return self.event.query()


def on_cuda(x) -> bool:
    """Is this argument (a tensor, or a list whose first item is one) on a GPU?"""
    if isinstance(x, (list, tuple)) and x:
        x = x[0]
    return isinstance(x, torch.Tensor) and x.is_cuda


def completed(work) -> bool:
    try:
        return work.is_completed()
    except Exception:  # noqa: BLE001  a Work that cannot tell is treated as finished
        return True


def in_flight(work, call_id: int, op: str) -> None:
    """Write the exit of a call that returned to Python but still runs on the GPU; `done` follows when it ends."""
    global _watcher
    pending[call_id] = work
    if _watcher is None:
        _watcher = threading.Thread(target=_watch, name="sandbox-inflight", daemon=True)
        _watcher.start()
    sink.emit({"ev": "exit", "rank": sink.rank, "id": call_id, "op": op, "inflight": True})


def _watch() -> None:
    while True:
        time.sleep(0.02)
        for call_id, work in list(pending.items()):
            if completed(work):
                pending.pop(call_id, None)
                sink.emit({"ev": "done", "rank": sink.rank, "id": call_id})
