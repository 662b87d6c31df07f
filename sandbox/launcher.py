"""Start N ranks fast, watch them, name what went wrong, and tear everything down.

    from sandbox import launch
    res = launch(my_module.train, world_size=4, args=(cfg,))
    print(res.verdict, res.diagnosis.summary)

One zygote process imports torch once and forks every rank (see `sandbox._zygote`), so a run costs about one
`import torch`, whatever N is. The zygote and its ranks form one process group of their own; the parent ends them
all with one signal, and the zygote and ranks die by themselves if the parent dies (PR_SET_PDEATHSIG).

The parent never imports torch. This module is the door: what to run (a function, by name or by value; a script; a
module) and the errors a caller sees. The run itself is `sandbox._run.Run`: the one run lifecycle
(`sandbox._run.lifecycle`, which `--launcher torchrun` shares) over the zygote (`sandbox._run.zygote`). In steps:
start the zygote; `watch` its pipe (`sandbox.channel`) and the ranks' trace files (`sandbox.events`), asking the
watchdog policy (`sandbox.policy.decide`) whether to stop; `stop` (ask every live rank for its Python stack with
SIGUSR1, then end it) and reap (every exit reported, nothing of ours left); `assemble` the result, whose verdict comes
from `sandbox.policy.judge`. Run with `-v` (or `logging.getLogger("sandbox").setLevel(logging.INFO)`) to see each step.
"""
from __future__ import annotations

import os
import sys
from typing import Callable

from sandbox import _paths
from sandbox._run import Run
from sandbox._run.options import MAX_WORLD_SIZE, Interrupted, UsageError, script_target
from sandbox.result import RunResult

__all__ = ["MAX_WORLD_SIZE", "Interrupted", "Run", "UsageError", "launch", "run_script"]


def _importable(fn: Callable) -> bool:
    """Can the ranks import `fn` by name? A function in a module, or in a script's __main__; not one typed into a
    notebook cell or an interactive session, not a lambda, not a closure."""
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if mod is None or "<locals>" in qual or "<lambda>" in qual:
        return False
    if mod == "__main__":  # a script's: the ranks load it from its file (not `python -` or `python -c`)
        return os.path.isfile(getattr(sys.modules.get("__main__"), "__file__", None) or "")
    return True


def _func_target(fn: Callable) -> dict:
    if not callable(fn):
        raise UsageError(f"launch needs a function to run on the ranks, not {fn!r}.")
    qual = getattr(fn, "__qualname__", None) or repr(fn)
    if not _importable(fn):
        import cloudpickle  # the ranks get the function itself, by value, with what it refers to

        try:
            return {"kind": "func", "module": getattr(fn, "__module__", None), "qualname": qual,
                    "fn_bytes": cloudpickle.dumps(fn)}
        except Exception as e:  # noqa: BLE001  whatever cloudpickle raises, something the function holds is the cause
            raise UsageError(f"{qual} cannot be sent to the ranks: {e}") from None
    target = {"kind": "func", "module": fn.__module__, "qualname": qual}
    if fn.__module__ == "__main__":
        target["path"] = os.path.abspath(sys.modules["__main__"].__file__)
    return target


def launch(fn: Callable, world_size: int = 4, args: tuple = (), kwargs: dict | None = None, *,
           code_file: str | None = None, explore: int | None = None, explore_all: bool = False,
           replay: int | None = None, **options):
    """Run `fn(*args, **kwargs)` on `world_size` ranks. `fn` may be importable (a module's function: the ranks
    import it) or not (typed into a notebook cell, a lambda, a closure: it is sent by value with cloudpickle).
    `code_file`: where the functions sent by value were written, as sites show it (`_paths.code_file`; by default
    `fn`'s own). See `Run` for the options. `explore=K`: run it under K schedules a cluster could give it
    (`sandbox.explore`) and return the `Explored` (its `.ok`, `.result`, `.summary()`), stopping at the first
    failure unless `explore_all`; `replay=SEED`: the RunResult of that seed's schedule. Both fork every run from
    this process's warm zygote unless `warm=False`."""
    import cloudpickle

    target = _func_target(fn)
    if code_file or "fn_bytes" in target:
        target["code_file"] = code_file or _paths.code_file(fn)
    try:
        target["payload"] = cloudpickle.dumps((tuple(args), dict(kwargs or {})))
    except Exception as e:  # noqa: BLE001  whatever pickling raises, the user's arguments are the cause
        raise UsageError(f"the arguments for {target['qualname']} cannot be pickled: {e}") from None
    if explore is not None or replay is not None:
        return _explored(target, world_size, explore, explore_all, replay, options)
    return Run(target, world_size, **options).run()


def _explored(target: dict, world_size: int, k: int | None, every: bool, seed: int | None, options: dict):
    from sandbox import explore

    if k is not None and seed is not None:
        raise UsageError("explore finds a schedule, replay runs one: give one of them.")
    options.setdefault("warm", True)
    env = options.pop("env", None)
    start = explore.started(lambda env: Run(target, world_size, env=env, **options).run(), env)
    try:
        # one at a time on GPUs (a GPU per rank) and into a trace_dir (each run would clear the others' files)
        jobs = 1 if options.get("gpu") or options.get("trace_dir") else explore.JOBS
        return explore.replay(start, seed)[1] if seed is not None else explore.explore(start, k, every=every,
                                                                                       jobs=jobs)
    except ValueError as e:
        raise UsageError(str(e)) from None


def run_script(path: str, argv: list[str] | tuple = (), world_size: int = 4, module: bool = False,
               **options) -> RunResult:
    """Run a script (or with module=True a module, like `python -m`) as `world_size` ranks, torchrun-style."""
    return Run(script_target(path, argv, module), world_size, **options).run()
