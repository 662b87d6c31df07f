"""The bug catalogue: one module per bug, each with `broken()` and `fixed()` side by side and a `BUG` record, and
the catalogue's runner.

Adding a bug is adding one module here; the CLI (`python -m sandbox.repro`), the labs, the tests and the docs read
this registry. A module defines:

    BUG = Bug(slug=..., title=..., source=..., symptom=..., world_size=4, min_world_size=2, needs="cpu",
              broken=Expect(...), fixed=Expect(...),
              gpu=Gpu(broken=Expect(...), fixed=Expect(...)),   # optional: what --gpu shows
              nnodes=2, node_options={...})      # optional: the ranks spread over simulated nodes (needs root)
    def broken(**kw): ...      # runs on every rank, like the code of the real report
    def fixed(**kw): ...
    def reference(**kw): ...   # optional: the single-process answer the fixed variant must match
    def options(world_size, gpu) -> dict   # optional: keyword arguments chosen in the parent (ports, sizes)

and a docstring in parts (Source, Symptom, Root cause, Fix, On GPUs (NCCL), Run: sandbox/bugs/docstring.py).

The rest of this package is the runner every reader shares:
- `record`: Bug, Expect, Gpu, and reading a module's record and docstring from its source;
- `docstring`: the docstring's parts, parsed once per bug (`Bug.parts`, `Bug.explanation`, `Bug.on_gpus`);
- `runner`: `run_variant`, a variant (or a learner's fix) on N ranks, judged;
- `expectation`: `unmet_expectations`, what of an Expect a run does not show;
- `reference`: a run's values against the single-process reference (torch.testing's semantics);
- `_entry`: what every rank of a catalogue run calls.

Nothing here imports torch, and neither does reading the registry: the parent reads each module's source (its
docstring and its `BUG = Bug(...)` assignment, which may use only literals, Bug, Expect and Gpu) without importing
it, so `python -m sandbox.repro --list` answers at once. The modules' functions, and their torch, run in the ranks.

A run without `--gpu` is a CPU run on any machine and any torch build: its ranks see no GPU (the launcher empties
CUDA_VISIBLE_DEVICES), so `torch.cuda.is_available()` is False there and a bug's code takes its gloo path. Under
`--gpu` each rank owns one GPU and `init()` below starts NCCL on it, as the reported code did.
"""
from __future__ import annotations

import os
import pkgutil

from sandbox import defaults
from sandbox.bugs.expectation import culprit_ranks, unmet_expectations
from sandbox.bugs.record import Bug, Expect, Gpu, read_bug
from sandbox.bugs.runner import SHARED_RUNS_ENV, FixNotSendable, VariantRun, run_variant, shared_run, unavailable

__all__ = ["SHARED_RUNS_ENV", "Bug", "Expect", "FixNotSendable", "Gpu", "VariantRun", "culprit_ranks", "init",
           "read_bug", "registry", "run_variant", "shared_run", "unavailable", "unmet_expectations"]


def init(timeout_s: float = defaults.PG_TIMEOUT_S, **kwargs):
    """init_process_group as the reported code calls it: NCCL when the rank has a GPU (`--gpu`), gloo otherwise.
    Returns the device this rank's tensors live on: its own GPU under NCCL, the CPU under gloo."""
    import datetime

    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()  # True only under --gpu: the ranks of a CPU run see no GPU
    dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    return torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")


def registry() -> dict[str, Bug]:
    """Every bug of the catalogue by slug, read from the modules' source without importing them (no torch). The
    runner's own modules hold no BUG record: they are read and passed over."""
    bugs = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.ispkg:
            continue
        bug = read_bug(os.path.join(info.module_finder.path, info.name + ".py"), f"{__name__}.{info.name}")
        if bug is not None:
            bugs[bug.slug] = bug
    return bugs
