"""A rank's error as the user's own program would show it: the traceback without the sandbox's frames (the
tracer's wrappers, the rank's runner, runpy), and the site of the error at the user's line."""
from __future__ import annotations

import traceback

from sandbox import _paths
from sandbox.trace.describe import display


def _is_sandbox_frame(path: str) -> bool:
    """A frame of the sandbox's own machinery (or runpy's, which the sandbox uses to run scripts)."""
    return _paths.is_sandbox(path) or path == "<frozen runpy>" or path.endswith(("/runpy.py", "\\runpy.py"))


def _drop_sandbox_frames(te: traceback.TracebackException, seen: set) -> None:
    if id(te) in seen:
        return
    seen.add(id(te))
    kept = [f for f in te.stack if not _is_sandbox_frame(f.filename)]
    if kept:  # an error of the sandbox itself (nothing else on the stack) keeps every frame
        te.stack = traceback.StackSummary.from_list(kept)
    for other in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if other is not None:
            _drop_sandbox_frames(other, seen)


def user_traceback(exc: BaseException) -> str:
    """The traceback of `exc` as the user's own program would print it: without the sandbox's frames (the tracer's
    wrappers, the rank's runner, runpy), in chained exceptions too. Torch's frames stay."""
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    _drop_sandbox_frames(te, set())
    return "".join(te.format())


def error_site(exc: BaseException) -> str | None:
    """file:line of the innermost frame of the user's code in an exception's traceback (not the standard library's:
    an error raised through a `with` block is reported at the user's line in it, not in contextlib)."""
    tb, site = exc.__traceback__, None
    while tb is not None:
        fn = tb.tb_frame.f_code.co_filename
        if not (_paths.is_plumbing(fn) or _paths.is_stdlib(fn)):
            site = f"{display(fn)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return site
