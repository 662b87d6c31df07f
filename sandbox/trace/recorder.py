"""PyTorch's Flight Recorder inside a rank (the second lens, `sandbox.flight`): switched on before the user's code
creates a process group, and dumped into the run's directory as `fr-<rank>.pkl` when the rank's code ends and
whenever the parent asks with SIGUSR2, even while the main thread is blocked inside a collective or inside DDP's
backward (a thread of its own takes the signal: SIGUSR2 is blocked in every other thread, and the threads torch
starts later inherit that). The dump leaves out the calls' Python frames: a dump with them imports torch._inductor
the first time (seconds), and the tracer already knows where its own calls were made. `SANDBOX_FLIGHT=0` in the
environment leaves the recorder off.
"""
from __future__ import annotations

import os
import pickle
import signal
import threading
import time

from sandbox import flight, rundir

_where: tuple[str, int] | None = None
_lock = threading.Lock()


def arm(directory: str, rank: int) -> bool:
    """Switch the recorder on for this rank (unless the user set its size, or switched it off) and start the
    thread that dumps it on SIGUSR2. Call before the user's code runs. Returns whether it did: the rank's `hello`
    says so, and only then does the parent send SIGUSR2 (whose default action would end the process)."""
    global _where
    if os.environ.get(flight.OFF) == "0":
        return False
    os.environ.setdefault(flight.ENV, flight.BUFFER)
    _where = (directory, rank)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    threading.Thread(target=_serve, name="sandbox-flight-recorder", daemon=True).start()
    return True


_final = False
SETTLE_S = 0.5  # how long the last dump waits for gloo to mark the rank's last calls completed


def _serve() -> None:
    while True:
        signal.sigwait({signal.SIGUSR2})
        dump()


def _snapshot():
    from sandbox import compat

    # without the Python frames: turning them into text imports torch._inductor (seconds, the first time); the
    # tracer's own calls and the rank's stack and traceback give the user's lines (`sandbox.flight_view.merge`)
    raw = compat.flight_recorder()
    nccl = compat.nccl_recorder()  # NCCL's own recorder, which the generic dump leaves out
    return raw if nccl is None else _joined(raw, nccl)


def _joined(*raws: bytes) -> bytes:
    """One dump of several recorders' (gloo's and NCCL's, in a job with groups of both): their entries, groups
    and status together. A dump with no entries adds nothing."""
    dumps = [d for d in (pickle.loads(r) for r in raws) if d.get("entries")]
    if len(dumps) <= 1:
        return pickle.dumps(dumps[0]) if dumps else raws[0]
    out = dict(dumps[0])
    for i, d in enumerate(dumps[1:], 1):  # record ids are per recorder: keep them apart
        out["entries"] = out["entries"] + [dict(e, record_id=e.get("record_id", 0) + i * 1_000_000)
                                           for e in d["entries"]]
        for key in ("pg_config", "pg_status"):
            out[key] = {**(out.get(key) or {}), **(d.get(key) or {})}
    return pickle.dumps(out)


def _settled(raw: bytes) -> bool:
    """Has the backend retired every call the recorder holds? (gloo retires a call a moment after wait() returns.)
    Per entry, not by the groups' `last_completed_collective`, which two gloo worker threads can leave behind for
    good (see sandbox.flight's `_completed`)."""
    return all(flight.retired(e) for e in pickle.loads(raw).get("entries") or ())


def dump(final: bool = False) -> None:
    """Write this rank's dump (atomically: a reader never sees half of one). The `final` one, when the rank's code
    has ended, waits (bounded) for the backend's bookkeeping, and no dump is written after it."""
    global _final
    if _where is None:
        return
    directory, rank = _where
    path = rundir.flight(directory, rank)
    with _lock:
        if _final:
            return
        try:
            raw = _snapshot()
            deadline = time.monotonic() + SETTLE_S
            while final and not _settled(raw) and time.monotonic() < deadline:
                time.sleep(0.005)
                raw = _snapshot()
        except Exception:  # noqa: BLE001  a torch without the recorder, or nothing recorded: the trace alone is judged
            return
        _final = final
        try:
            with open(path + ".tmp", "wb") as f:
                f.write(raw)
            os.replace(path + ".tmp", path)
        except OSError:  # the run's directory is gone (the run is being torn down): nothing left to tell
            pass
