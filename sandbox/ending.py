"""How a rank's program ends: as a Python program's would, as far as anyone outside the process can see, and then
at once, with `os._exit`.

Python's own exit waits for the program's non-daemon threads, runs its atexit handlers, and then tears the
interpreter down: the traceback of an uncaught exception is dropped, every module's globals are cleared (so the
program's objects are finalized: `__del__` methods, suspended generators' `finally`, files closed and so flushed,
temporary files deleted), and at last torch's own objects and the C++ ones. A rank does all of it for the
program's own objects (`tear_down`) and skips the rest: there, a process group still alive (the tracer keeps
every group: sandbox/trace/record.py) was destroyed while the interpreter was half gone, and gloo's worker threads
aborted the process ("terminate called without an active exception") or hung it. Both entries end this way: a
sandbox rank (sandbox/rank.py) and a torchrun worker (`python -m sandbox.trace`). A file the program opened that
nothing of it closes (one held by another of its modules) is flushed, unless a daemon thread holds it: Python
never unwinds those threads, and what their files hold in a buffer is lost there too.
"""
from __future__ import annotations

import atexit
import builtins
import functools
import gc
import io
import os
import sys
import threading
import traceback
import types
import weakref

_opened: weakref.WeakSet = weakref.WeakSet()
# The program's globals (a script's or a module's namespace, as runpy leaves it, and the dict its code ran in) and
# an uncaught exception's traceback: kept until the rank's end, as the interpreter keeps them until its teardown.
# Dropped one by one when runpy returned, they once ran gloo's destructors while the group's worker thread still
# needed the GIL (1 run in 6 of a DDP script hung); the tracer now keeps every group, and `tear_down` drops them
# after the atexit handlers, as Python does.
_namespaces: list[dict] = []
_tracebacks: list = []


def begin() -> None:
    """Before the program runs: what its end needs. Every object alive now (torch's, the sandbox's, imported
    before the program) is moved out of the garbage collector's reach (`gc.freeze`): they live until the process
    ends, and the collection `tear_down` runs then scans the program's objects only (a full collection with
    torch._dynamo imported took 100 ms; the program's own collections skip them too). And from now on every file
    `open` (builtins.open, io.open, pathlib's) returns is remembered, weakly, for `flush_files`. Once per process."""
    if getattr(builtins.open, "_sandbox_tracks", False):
        return
    gc.freeze()
    real = io.open

    @functools.wraps(real)
    def opened(*args, **kwargs):
        f = real(*args, **kwargs)
        _opened.add(f)
        return f

    opened._sandbox_tracks = True
    builtins.open = io.open = opened


def join_threads() -> None:
    """Wait for the program's non-daemon threads as Python's exit does, before its atexit handlers: first the
    threading module's own exit work (which lets an executor that was never shut down, concurrent.futures' or
    torch's, stop its idle workers), then every non-daemon thread, started while waiting or not. Python's own
    `threading._shutdown` does exactly this; where it is missing, the same through public calls, less the executors'
    exit work. Once per process, at its end. Bounded by the launcher, which ends a rank that never finishes."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None and threading.current_thread() is threading.main_thread():
        shutdown()
        return
    main = threading.main_thread()
    while True:
        left = [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]
        if not left:
            return
        for t in left:
            t.join()


def ran(namespace: dict) -> None:
    """The program (a script or module runpy ran) returned: keep its namespace, and the dict its code ran in (runpy
    returns a copy; the program's functions hold the original), for `tear_down`."""
    _namespaces.append(namespace)
    mine = sys.modules["__main__"].__dict__
    for v in list(namespace.values()):
        for f in [v, *vars(v).values()] if isinstance(v, type) else [v]:
            g = getattr(f, "__globals__", None) if isinstance(f, types.FunctionType) else None
            if g is not None and g is not mine and g.get("__name__") == "__main__" and not _held(g):
                _namespaces.append(g)


def raised(e: BaseException) -> None:
    """The program ended with `e` (an exception, SystemExit too): keep its traceback, and the program's globals
    from its frames, for `tear_down`."""
    _tracebacks.append(e.__traceback__)
    mine = sys.modules["__main__"].__dict__
    tb = e.__traceback__
    while tb is not None:
        g = tb.tb_frame.f_globals
        if g is not mine and g.get("__name__") == "__main__" and not _held(g):
            _namespaces.append(g)
        tb = tb.tb_next


def _held(d: dict) -> bool:
    return any(d is n for n in _namespaces)


def report(e: BaseException, shown: str) -> None:
    """Print the program's uncaught exception as Python would: through the program's own `sys.excepthook` if it
    set one (with the traceback from its own first frame), else `shown` (the traceback without the sandbox's
    frames, as the default hook prints it; the rank's lines are labelled already, so not through the hook
    `init_process_group` wraps around it: `compat.programs_excepthook`)."""
    from sandbox import _paths, compat

    hook = compat.programs_excepthook()
    if hook is None:
        sys.stderr.write(shown)
        return
    tb = e.__traceback__
    while tb is not None and _paths.is_plumbing(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    try:
        hook(type(e), e, tb)
    except BaseException:  # noqa: BLE001  as Python does when the hook fails: both are printed
        sys.stderr.write(f"Error in sys.excepthook:\n{traceback.format_exc()}\nOriginal exception was:\n{shown}")


def tear_down() -> None:
    """What the interpreter's teardown does to the program's own objects: the uncaught exception's frames are
    cleared, then its globals, as CPython clears a module's (names beginning with one underscore first, then the
    rest, each set to None), and the cycles among them collected."""
    for tb in _tracebacks:
        traceback.clear_frames(tb)
    _tracebacks.clear()
    for d in _namespaces:
        for first in (True, False):
            for k in list(d):
                if k != "__builtins__" and (k.startswith("_") and not k.startswith("__")) == first:
                    d[k] = None
    _namespaces.clear()
    gc.collect()


def run_exit_work() -> None:
    """The atexit handlers, as a normal interpreter exit runs them (less torch's own teardown that nothing outside
    the process sees: `compat.drop_exit_teardown`), the program's own teardown (`tear_down`), then every file the
    program left open is flushed (`flush_files`)."""
    try:
        from sandbox import compat

        compat.drop_exit_teardown()
    except Exception:  # noqa: BLE001  the handlers run in full: slower, never wrong
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001  printed, as Python prints a failing atexit handler; the outcome stands
        traceback.print_exc()
    try:
        tear_down()
    except BaseException:  # noqa: BLE001  a finalizer's failure is printed, as Python prints it; the outcome stands
        traceback.print_exc()
    flush_files()


def flush_files() -> None:
    """Flush every file opened since `begin` that is still open, as closing it at teardown would, except
    those a daemon thread holds (Python never unwinds those threads: their buffers are lost)."""
    daemons = _held_by_daemons()
    for f in list(_opened):
        try:
            if not f.closed and id(f) not in daemons:
                f.flush()
        except Exception:  # noqa: BLE001  as at teardown: a file that cannot be flushed is left as it is
            pass


def _held_by_daemons() -> set[int]:
    """The ids of what the frames of live daemon threads hold: their locals, and what those refer to directly."""
    frames = sys._current_frames()
    out: set[int] = set()
    for t in threading.enumerate():
        f = frames.get(t.ident) if t.daemon else None
        while f is not None:
            for v in f.f_locals.values():
                out.add(id(v))
                out.update(id(x) for x in gc.get_referents(v))
            f = f.f_back
    return out


def exit_now(code: int) -> None:
    """Flush the standard streams and end the process with `code`, without the interpreter's teardown."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
