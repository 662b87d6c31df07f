"""Which source files are the sandbox's plumbing or torch's own, so call sites, stack tops and tracebacks show the
user's code; and how a file is shown (`shown_path`). Torch-free: the tracer (in the ranks) and the diagnosis (in the
parent, or offline) share these rules."""
from __future__ import annotations

import importlib.util
import os
import re
import sysconfig

_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
# the project: the directory that holds the `sandbox` package (a checkout, or site-packages when installed)
PROJECT = os.path.dirname(_HERE.rstrip(os.sep)) + os.sep
_CHECKOUT = os.path.exists(os.path.join(PROJECT, "pyproject.toml"))  # not site-packages: all of it is the project's
# the files that stand between a user's code and torch.distributed (the tracer, every file of it; the primitives
# too: a hang inside reduce_tensor is reported at the user's call of it), the simulated devices (an error their
# device check raises is reported at the user's op, as a real device's would be) and the catalogue's `init()`
# helper and rank entry (a bug's init is reported in the bug's module), and compat.py (a call made through it is
# reported at the caller's line); the bug modules and user code are not.
# trace.py and _zygote.py: the tracer and the zygote before each was a package, as a stack read from an older trace
# directory names them
_FILES = ("trace.py", "rank.py", "_zygote.py", "launcher.py", "primitives.py", "simulate.py", "compat.py",
          os.path.join("bugs", "__init__.py"), os.path.join("bugs", "_entry.py"))
_DIRS = ("trace", "_zygote")
PLUMBING_FILES = frozenset(os.path.join(_HERE, f) for f in _FILES)
_PLUMBING_DIRS = tuple(os.path.join(_HERE, d) + os.sep for d in _DIRS)
_PLUMBING_SUFFIXES = tuple(os.sep + os.path.join("sandbox", f) for f in _FILES)
_PLUMBING_PARTS = tuple(os.sep + os.path.join("sandbox", d) + os.sep for d in _DIRS)


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
        hit = (is_sandbox(path) or path.startswith("<frozen")
               or os.path.basename(path) == "runpy.py"
               or (TORCH_DIR is not None and path.startswith(TORCH_DIR))
               or f"{os.sep}site-packages{os.sep}torch{os.sep}" in path   # a trace from another machine
               or f"{os.sep}dist-packages{os.sep}torch{os.sep}" in path)
        _cache[path] = hit
    return hit


def is_sandbox(path: str) -> bool:
    """Is this file the sandbox's own machinery (the tracer, the rank runner, ...), here or in a trace from another
    machine (matched by its path inside the package)?"""
    return (path in PLUMBING_FILES or path.startswith(_PLUMBING_DIRS) or path.endswith(_PLUMBING_SUFFIXES)
            or any(part in path for part in _PLUMBING_PARTS))


DYNAMIC_CODE = "<dynamic-code>"  # the file name cloudpickle gives every function it sends by value
_dynamic_code_is: list[str | None] = [None]


def name_dynamic_code(shown: str | None) -> None:
    """In a rank: the file that the functions sent by value came from, as a site shows it ("<cell>" for a notebook
    cell, else the file's shown path), so their calls are not all placed in cloudpickle's "<dynamic-code>"."""
    _dynamic_code_is[0] = shown


_cells: dict[str, str] = {}  # "Cell In[7]" -> the file name IPython compiled that cell under (its linecache key)


def code_file(fn) -> str | None:
    """In the parent: where a function sent by value was written, as `name_dynamic_code` takes it: for code typed
    into IPython or Jupyter, the cell as IPython's own tracebacks name it ("Cell In[7]"; its file is a temporary
    name no reader knows, and `resolve` maps it back so its source can be read), else the file's shown path."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    name = code.co_filename
    if name.startswith("<ipython-input") or re.search(r"ipykernel_\d+[/\\]\d+\.py$", name):
        label = "<cell>"
        try:
            from IPython import get_ipython
            number = getattr(getattr(get_ipython(), "compile", None), "_filename_map", {}).get(name)
        except ImportError:  # not in IPython after all: the plain label
            number = None
        if number is not None:
            label = f"Cell In[{number}]"
        _cells[label] = name
        return label
    return None if name.startswith("<") else shown_path(name)


def shown_path(path: str) -> str:
    """How a file is shown in a site, a stack top or a note: relative to the project when it is the project's (the
    sandbox's package, or anything in its checkout), whatever the working directory; else relative to the working
    directory when it is below it; else as it is."""
    if path == DYNAMIC_CODE and _dynamic_code_is[0]:
        return _dynamic_code_is[0]
    for label, name in _cells.items():  # a notebook cell's file, read back for its source: shown as its label
        if name == path:
            return label
    if not os.path.isabs(path):
        return path
    here = os.path.normpath(path)
    if here.startswith(_HERE) or (_CHECKOUT and here.startswith(PROJECT)):
        return os.path.relpath(here, PROJECT)
    try:
        rel = os.path.relpath(here)
    except ValueError:  # another drive (Windows): the absolute path is the honest answer
        return path
    return rel if not rel.startswith("..") else path


def resolve(shown: str) -> str:
    """The file a shown path names: the inverse of `shown_path` (the project's, else below the working directory;
    a notebook cell's label, the name IPython keeps its source under)."""
    if shown in _cells:
        return _cells[shown]
    if os.path.isabs(shown):
        return shown
    mine = os.path.join(PROJECT, shown)
    return mine if os.path.exists(mine) else os.path.abspath(shown)


_OTHER_STDLIB = re.compile(r"[/\\]lib[/\\]python3\.\d+[/\\](?!(site|dist)-packages[/\\])")


def is_stdlib(path: str) -> bool:
    """Python's own library, here or (by the shape of its path) in a trace from another machine."""
    if path.startswith(_STDLIB):
        return f"{os.sep}site-packages{os.sep}" not in path
    return _OTHER_STDLIB.search(path) is not None
