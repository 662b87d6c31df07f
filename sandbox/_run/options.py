"""What a run accepts, checked before anything starts: the errors a caller sees (`UsageError`, `Interrupted`), the
options' bounds, and the trace directory. Torch-free, like the rest of the engine."""
from __future__ import annotations

import math
import os
import shutil
import signal

from sandbox import rundir

MAX_WORLD_SIZE = 128


class UsageError(ValueError):
    """Bad input from the user: the CLI prints it as one sentence and exits 2."""


class Interrupted(KeyboardInterrupt):
    """Raised by `launch` after it cleaned up on Ctrl-C or SIGTERM; `.result` tells where every rank was,
    `.signal` which signal ended it."""

    def __init__(self, result, signum: int = signal.SIGINT):
        super().__init__("interrupted")
        self.result = result
        self.signal = signum


def script_target(path: str, argv=(), module: bool = False) -> dict:
    """What the ranks run for a script (or with `module`, a module, like `python -m`), under either launcher: one
    sentence if the script is not there."""
    if module:
        return {"kind": "module", "name": path, "argv": list(argv)}
    if not os.path.isfile(path):
        raise UsageError(f"no such script: {path}")
    return {"kind": "script", "path": os.path.abspath(path), "argv": list(argv)}


def check(world_size, hang_after, timeout, pg_timeout, env) -> None:
    """One sentence (UsageError) for the first option out of bounds."""
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise UsageError(f"the number of ranks must be a whole number of at least 1, not {world_size!r}.")
    if world_size > MAX_WORLD_SIZE:
        raise UsageError(f"{world_size} ranks is more than this sandbox runs on one machine"
                         f" (at most {MAX_WORLD_SIZE}).")
    for name, v in (("hang_after", hang_after), ("timeout", timeout), ("pg_timeout", pg_timeout)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
            raise UsageError(f"{name} must be a positive number of seconds, not {v!r}.")
    if env is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in dict(env).items()):
        raise UsageError("env must map names to strings (environment values are text).")


def trace_dir(path: str) -> str:
    """A directory the caller keeps the run's traces in: made if need be, emptied of an earlier run's files (those
    `sandbox.rundir` names: a user's own files stay)."""
    try:
        os.makedirs(path, exist_ok=True)
        for name in os.listdir(path):
            full = os.path.join(path, name)
            if rundir.RUN_FILE.fullmatch(name) and os.path.isfile(full):
                os.unlink(full)
            elif rundir.RUN_DIRS.fullmatch(name) and os.path.isdir(full):
                shutil.rmtree(full)
    except OSError as e:
        raise UsageError(f"cannot use {path} as the trace directory: {e.strerror or e}.") from None
    return os.path.abspath(path)


def check_nodes(world_size: int, nnodes, node_options: dict | None = None, gpu: bool = False) -> None:
    """Several simulated nodes: a whole number that divides the ranks, the privileges namespaces need (the
    sentence `sandbox.nodes.available` gives, checked only when more than one node is asked for), and options the
    nodes know."""
    if not isinstance(nnodes, int) or isinstance(nnodes, bool) or nnodes < 1:
        raise UsageError(f"the number of nodes must be a whole number of at least 1, not {nnodes!r}.")
    if world_size % nnodes:
        raise UsageError(f"{world_size} ranks cannot be spread evenly over {nnodes} nodes.")
    if gpu and nnodes > 1:
        raise UsageError("simulated nodes run CPU ranks (gloo): leave out --gpu with --nnodes.")
    if nnodes > 1:
        from sandbox import nodes  # namespaces are only touched when several nodes are asked for

        ok, why = nodes.available()
        if not ok:
            raise UsageError(why)
    known = {"hostname_loopback", "cap"}
    if node_options and set(node_options) - known:
        raise UsageError(f"node options are {', '.join(sorted(known))}, not "
                         f"{', '.join(sorted(set(node_options) - known))}.")
    if node_options and nnodes == 1:
        raise UsageError(f"node options ({', '.join(sorted(node_options))}) apply to several nodes: give nnodes=2 "
                         f"or more.")
    if (node_options or {}).get("cap") is not None:
        from sandbox import nodes

        try:
            nodes.tbf_args(node_options["cap"])
        except ValueError as e:
            raise UsageError(str(e)) from None


def check_faults(faults: list, world_size: int, nnodes: int) -> None:
    """Faults need several nodes, and may name only nodes and ranks the run has."""
    if not faults:
        return
    if nnodes < 2:
        raise UsageError("faults are injected into simulated nodes: give nnodes=2 or more (--nnodes).")
    from sandbox import faults as faultlib

    wrong = faultlib.check(faults, nnodes, world_size)
    if wrong:
        raise UsageError(wrong)
