"""The catalogue's runner: one variant of a bug on N real ranks, held against what its module documents.

`python -m sandbox.repro`, the labs (`sandbox.lab`), the docs build (through repro's --json), tools/ and the tests
all run a bug through `run_variant`, so a variant is run, and judged, one way everywhere. A learner's fix runs the
same way, as the fixed variant with the learner's function in place of the module's `fixed`.

Importing this imports neither torch nor the launcher: both come with the first run.
"""
from __future__ import annotations

import importlib
import os
from typing import Any, Callable, NamedTuple

from sandbox import _paths, defaults
from sandbox.bugs.expectation import unmet_expectations


class VariantRun(NamedTuple):
    """A variant's run and whether it showed what its module documents (`why_not`: what it did not show)."""
    result: Any            # sandbox.result.RunResult
    as_documented: bool
    why_not: list[str]


# A folder in which a catalogue variant's run on its documented ranks is made once for every process that names it
# (`shared_run`): a test session names it for its tests, the kernels of the labs it executes and the docs build.
SHARED_RUNS_ENV = "SANDBOX_SHARED_RUNS"


class FixNotSendable(ValueError):
    """A learner's function that cannot be pickled to the ranks (it holds a lock, a socket, an open file...)."""


def options(bug, n: int, gpu: bool = False) -> dict:
    """The keyword arguments every rank's variant gets: chosen once, in the parent, by the module's `options()`
    (free ports, sizes for n ranks); none for a module without one."""
    mod = importlib.import_module(bug.module)
    return mod.options(n, gpu) if hasattr(mod, "options") else {}


def unavailable(bug) -> str | None:
    """Why this bug cannot run here, in `sandbox.nodes.available`'s one sentence, or None: a bug on several simulated
    nodes needs what they need (root and network namespaces)."""
    if bug.nnodes == 1:
        return None
    from sandbox import nodes  # torch-free; only touched for a bug that needs nodes

    ok, why = nodes.available()
    return None if ok else why


def run_variant(bug, variant: str, n: int, *, gpu: bool = False, debug: str | None = None,
                fix: Callable | None = None, **launch_options) -> VariantRun:
    """Run `variant` ("broken" or "fixed") of `bug` on `n` ranks (one GPU each, on NCCL, with `gpu`) and hold the
    result against the variant's documented expectation. `debug` is a TORCH_DISTRIBUTED_DEBUG level ("OFF" or
    None: unset). `fix`: a function run on every rank in place of the module's own `variant`, with the same
    keyword arguments (a learner's fix, judged as the fixed variant). A bug with `nnodes` runs on that many
    simulated nodes (sandbox.launcher.UsageError where they cannot be made: `unavailable` says so beforehand).
    Raises FixNotSendable for a fix that cannot reach the ranks, and sandbox.launcher.Interrupted after Ctrl-C (its
    `result` is the run so far)."""
    from sandbox.bugs import _entry
    from sandbox.launcher import launch

    if variant not in ("broken", "fixed"):
        raise ValueError(f"variant is 'broken' or 'fixed', not {variant!r}.")
    level = defaults.debug_env(debug).get("TORCH_DISTRIBUTED_DEBUG")
    if bug.nnodes > 1:  # spread over its nodes as torchrun --nnodes would (n must divide evenly: launch says so)
        launch_options.setdefault("nnodes", bug.nnodes)
        launch_options.setdefault("node_options", bug.node_options)
    mod = importlib.import_module(bug.module)
    if hasattr(mod, "launcher"):  # a bug that is about the launcher itself: torchrun's agents, faults injected
        res = _under_torchrun(bug, variant, n, mod.launcher(variant), options(bug, n, gpu), fix, debug=level,
                              **launch_options)
    else:
        res = launch(_entry.run, world_size=n, args=(bug.module, variant, options(bug, n, gpu), _pickled(fix)),
                     code_file=_paths.code_file(fix) if fix is not None else None,
                     gpu=gpu, debug=level, timeout=bug.timeout, preload=[bug.module], **launch_options)
    why = unmet_expectations(bug.expect(variant, gpu), res, debug=level is not None)
    return VariantRun(res, not why, why)


def _under_torchrun(bug, variant: str, n: int, how: dict, kwargs: dict, fix: Callable | None, *,
                    debug: str | None, **launch_options):
    """A variant as a module that torchrun's agents start on the bug's simulated nodes (`sandbox.agents`), with the
    faults and restarts its module's `launcher(variant)` asks for; judged like any other run."""
    import json

    from sandbox import agents, faults
    from sandbox.launcher import UsageError

    if n % bug.nnodes:  # torchrun's --nproc-per-node is per node: every node the same
        raise UsageError(f"{n} ranks cannot be spread evenly over {bug.nnodes} nodes.")
    if fix is not None:
        raise FixNotSendable("a fix for a bug run under torchrun is a change to its script: edit the module's "
                             "`fixed` and run it again.")
    unknown = set(launch_options) - {"hang_after", "trace_dir", "timeout", "nnodes", "node_options"}
    if unknown:
        raise ValueError(f"{', '.join(sorted(unknown))} cannot be given to a bug run under torchrun.")
    target = {"kind": "module", "name": "sandbox.bugs._entry", "argv": [bug.module, variant, json.dumps(kwargs)]}
    return agents.AgentsRun(target, nnodes=bug.nnodes, nproc_per_node=n // bug.nnodes,
                            max_restarts=how.get("max_restarts", 0), node_options=bug.node_options,
                            faults=[faults.parse("kill", how["kill_node"])] if how.get("kill_node") else [],
                            debug=debug, **{"timeout": bug.timeout, **{k: v for k, v in launch_options.items()
                                                                        if k not in ("nnodes", "node_options")}}).run()


def _pickled(fix: Callable | None) -> bytes | None:
    if fix is None:
        return None
    try:
        import cloudpickle  # a function typed into a notebook cell travels by value, an importable one by name

        return cloudpickle.dumps(fix)
    except Exception as e:  # noqa: BLE001  whatever pickling raises, something the function holds is the cause
        raise FixNotSendable(f"{getattr(fix, '__name__', fix)!s} cannot be sent to the ranks: {e}.") from e


def shared_run(cache: str, bug, variant: str = "broken") -> VariantRun:
    """`bug`'s `variant` on its documented ranks, made once for every process asking with the same `cache` folder
    (SHARED_RUNS_ENV): the first to ask runs it (`run_variant`), under a lock of its own, and keeps it there; the
    others wait for it and read it. A run that raised is kept by nobody: the next asker runs it."""
    import fcntl
    import pickle

    os.makedirs(cache, exist_ok=True)
    kept = os.path.join(cache, f"{bug.slug}-{variant}.pkl")
    with open(os.path.join(cache, f"{bug.slug}-{variant}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # bounded: the holder's run has its own limit (the bug's timeout)
        if os.path.exists(kept):
            with open(kept, "rb") as f:
                return pickle.load(f)
        run = run_variant(bug, variant, bug.world_size)
        with open(kept + ".tmp", "wb") as f:
            pickle.dump(run, f)
        os.replace(kept + ".tmp", kept)
        return run
