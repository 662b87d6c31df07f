"""What training scripts import lazily can be imported once in the zygote (`sandbox._zygote`), before the fork
(`PRELOAD`), rather than by every rank on its own: measured with `python -X importtime` on a DDP script (a tiny
model, SGD or Adam, a DataLoader with a DistributedSampler, backward, step, torch.save), after `import torch,
torch.distributed` the script imported 832 modules in 1.35 s, 829 of them (1.29 s) under `torch._dynamo`, which the
first `DistributedDataParallel(...)` and the first `optimizer.step()` import; the other three (the DataLoader's and
torch.save's) cost nothing to speak of. Importing it starts no thread (tests/test_startup.py holds both facts).

It is on unless SANDBOX_PRELOAD=0. With `torch._dynamo` imported before the fork, about half of the 4-rank runs of
that DDP script once hung as the script's globals were freed (runpy dropped them when the script returned): DDP's
Reducer dropped the last reference to the gloo group, whose destructor joins its worker thread holding the GIL,
while that thread was freeing the last all_reduce of the backward pass, whose captured state holds a Python object
and so needs the GIL. A plain parent that imports `torch._dynamo`, forks 4 processes and runs the script in each
with runpy hung the same way (4 times in 12; 0 in 12 without the import): it is torch's and the fork's. A rank now
keeps its script's globals until it exits (`sandbox.rank`), as a program keeps them until its interpreter ends, and
ends with os._exit: 0 hangs in 22 runs with the preload (1 in 6 before). Functions sent to the ranks return before
their group is destroyed and were not seen to hang (0 in 8). A run preloads when the code it runs mentions what
imports PRELOAD (`NEEDS_PRELOAD`), so a trivial job never pays for it; a warm zygote once one of its runs has needed
it, when it is next idle, so every later run forks with it in place (a notebook whose runs never need it never
imports it: 1.3 CPU-s and the memory saved per kernel).
"""
from __future__ import annotations

import importlib
import importlib.machinery
import os
import re
import sys

PRELOAD = ("torch._dynamo",)  # imported lazily by DDP's constructor and the first optimizer step (see above)
# what, in the code a run runs, leads to PRELOAD: an optimizer, DDP or FSDP, torch.compile, dynamo itself
PRELOAD_ENV = "SANDBOX_PRELOAD"  # "0": never preload (to measure without it, or to rule it out)
NEEDS_PRELOAD = re.compile(rb"\boptim\b|DistributedDataParallel|FullyShardedDataParallel|fully_shard|torch\.compile"
                           rb"|_dynamo")


def done() -> bool:
    """Is PRELOAD imported in this process?"""
    return all(m in sys.modules for m in PRELOAD)


def wanted() -> bool:
    """Is the preload wanted (yes unless SANDBOX_PRELOAD=0 in this zygote's environment, i.e. its run's)?"""
    return os.environ.get(PRELOAD_ENV, "1") != "0"


def run() -> None:
    """Import PRELOAD (the zygote masks SIGTERM around it, as around torch's import: threads started inside must
    leave it to the main thread)."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001  only a head start: a rank that needs it imports it, and reports why not
            pass


def _module_file(name: str) -> str | None:
    """The source file of module `name`, found without importing it or its packages (their code must not run
    before the fork)."""
    path, spec, parts = None, None, name.split(".")
    for i in range(len(parts)):
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:i + 1]), path)
        if spec is None:
            return None
        path = spec.submodule_search_locations
    return spec.origin if spec is not None and spec.has_location else None


def _code(target: dict, modules=()):
    """The code a run runs, as bytes, one piece at a time: the bytes of a function sent by value (cloudpickle keeps
    the names it refers to), the source of its script or module, and of the modules the run asks to import before
    the fork (a catalogue run's target is a small runner; its bug module is the code). A file that cannot be read is
    left out (its run imports what it needs itself, as without a preload)."""
    if target.get("fn_bytes"):
        yield target["fn_bytes"]
    names = list(modules)
    path = target.get("path")
    if path is None and not target.get("fn_bytes"):
        names.insert(0, target["name"] if target["kind"] == "module" else target["module"])
    paths = [path] if path else []
    for name in names:
        try:
            paths.append(_module_file(name))
        except (ImportError, ValueError):  # a malformed name: the run reports it itself
            continue
    for p in paths:
        try:
            with open(p, "rb") as f:
                yield f.read()
        except (OSError, TypeError):  # no source to read (a built-in or compiled module, a vanished file)
            continue


def needed(target: dict, modules=()) -> bool:
    """Does the code this run runs (`_code`) mention what imports PRELOAD?"""
    return any(NEEDS_PRELOAD.search(code) for code in _code(target, modules))


# Libraries a run's own module imports, which a warm zygote imports once it is idle, so that the runs after it fork
# with them in place: each run's zygote imports the user's module afresh (edits to it are seen), and with it these
# again. pytest: a function launched from a test module (the pytest plugin's way) made its run's zygote import
# pytest every time, 143 ms of the 254 ms that `import test_api` costs after torch (2 cores, -X importtime); 60 of
# the quick tier's 347 runs. Each is imported only in a warm zygote, starts no thread, and holds no state a run
# could see. A statement that names it: `import pytest`, `import os, pytest`, `from pytest import ...`, not a comment.
LIBRARIES = {"pytest": re.compile(rb"^[ \t]*(?:from[ \t]+pytest\b|import[ \t][^#\n]*(?<![\w.])pytest\b)", re.M)}
# what every launcher's module imports (`from sandbox import launch`): the sandbox's own, imported by a warm zygote
# when idle whatever the run
OURS = ("sandbox.launcher",)


def libraries(target: dict, modules=()) -> list[str]:
    """The LIBRARIES the code this run runs (`_code`) imports."""
    code = list(_code(target, modules))
    return [name for name, pattern in LIBRARIES.items() if any(pattern.search(c) for c in code)]


def import_quietly(names) -> bool:
    """Import those of `names` not imported yet; a failure is left to the run that needs it. Whether any was new."""
    new = False
    for name in names:
        if name not in sys.modules:
            new = True
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001  only a head start: a run that needs it imports it, and reports why not
                pass
    return new
