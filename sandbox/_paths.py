"""Which source files are the sandbox's plumbing or torch's own, so call sites, stack tops and tracebacks show the
user's code. Torch-free: the tracer (in the ranks) and the diagnosis (in the parent, or offline) share this rule."""
from __future__ import annotations

import importlib.util
import os
import sysconfig

_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
# the files that stand between a user's code and torch.distributed (the primitives too: a hang inside
# reduce_tensor is reported at the user's call of it), the simulated devices (an error their device check raises
# is reported at the user's op, as a real device's would be) and the catalogue's `init()` helper (a bug's init is
# reported in the bug's module); the bug modules themselves and user code are not plumbing
_FILES = ("trace.py", "rank.py", "_zygote.py", "launch.py", "primitives.py", "simulate.py",
          os.path.join("bugs", "__init__.py"))
PLUMBING_FILES = frozenset(os.path.join(_HERE, f) for f in _FILES)
_PLUMBING_SUFFIXES = tuple(os.sep + os.path.join("sandbox", f) for f in _FILES)


def _torch_dir() -> str | None:
    try:
        spec = importlib.util.find_spec("torch")  # finds the package without importing it
    except (ImportError, ValueError):  # no torch here (a machine that only reads traces)
        return None
    return os.path.dirname(spec.origin) + os.sep if spec and spec.origin else None


TORCH_DIR = _torch_dir()
_STDLIB = sysconfig.get_paths().get("stdlib", "\0") + os.sep
_cache: dict[str, bool] = {}


def is_plumbing(path: str) -> bool:
    """Is this file torch's or the sandbox's machinery (not a frame a user wants to see)?"""
    hit = _cache.get(path)
    if hit is None:
        hit = (path in PLUMBING_FILES or path.endswith(_PLUMBING_SUFFIXES) or path.startswith("<frozen")
               or os.path.basename(path) == "runpy.py"
               or (TORCH_DIR is not None and path.startswith(TORCH_DIR))
               or f"{os.sep}site-packages{os.sep}torch{os.sep}" in path   # a trace from another machine
               or f"{os.sep}dist-packages{os.sep}torch{os.sep}" in path)
        _cache[path] = hit
    return hit


def is_stdlib(path: str) -> bool:
    return path.startswith(_STDLIB) and f"{os.sep}site-packages{os.sep}" not in path
