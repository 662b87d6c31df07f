"""The sandbox's defaults, decided once: every front door (launch(), the command lines, the cell magic, the pytest
plugin, the labs) reads them from here, so a run started any of these ways is judged by the same clock.

Nothing here imports torch.
"""
from __future__ import annotations

import signal

HANG_AFTER_S = 1.0    # every live rank blocked in calls nobody can complete for this long: a hang
RUN_TIMEOUT_S = 300.0  # the whole run, whatever it is doing; then the ranks are stopped and the verdict is "timeout"
PG_TIMEOUT_S = 60.0   # the process group's own timeout (init_process_group(timeout=)) where the sandbox creates it
# String-hash seeds per run: separate processes (torchrun's workers) each draw their own, so a set of strings can
# iterate in another order on every rank; forked ranks share their zygote's. The ranks are dealt among this many
# zygotes (one more interpreter each, importing torch beside the first), each with its own seed, rank r in zygote
# r % HASH_SEEDS, so neighbouring ranks differ. Not where the run's environment sets PYTHONHASHSEED: then, as under
# torchrun, every rank has that seed.
HASH_SEEDS = 2
# How many a run (or a warm zygote) uses: set in the environment, it overrides HASH_SEEDS (SANDBOX_HASH_SEEDS=1: one
# seed and one zygote, the cost of a second interpreter saved where hash order is not the question); the launcher
# passes the number it chose to the zygote in the same variable
HASH_SEEDS_ENV = "SANDBOX_HASH_SEEDS"
# The string-hash seed of each zygote of a run, "S0,S1" (an explored schedule's, `sandbox.schedules`): such a run
# starts cold, its first zygote under S0, each sibling under the next; without it every zygote draws its own
HASH_SEED_LIST_ENV = "SANDBOX_HASH_SEED_LIST"


def hash_seeds(environ, world_size: int | None = None) -> int:
    """The number of string-hash seeds for a run of `world_size` ranks (None: a warm zygote, for any run) in this
    environment: one where PYTHONHASHSEED is set (as torchrun's workers then all have it), else SANDBOX_HASH_SEEDS if
    set, else HASH_SEEDS; never more than the ranks."""
    if environ.get("PYTHONHASHSEED"):
        return 1
    raw = environ.get(HASH_SEEDS_ENV, "")
    n = int(raw) if raw.strip().isdigit() and int(raw) >= 1 else HASH_SEEDS
    return n if world_size is None else max(1, min(n, world_size))
# Set by the torchrun launcher (sandbox.agents) to its pid: its workers, which torchrun starts in sessions of their
# own, end themselves when that process is gone (sandbox.trace)
WATCH_PID_ENV = "SANDBOX_WATCH_PID"


def debug_env(level: str | None) -> dict[str, str]:
    """The ranks' TORCH_DISTRIBUTED_DEBUG for a --debug level: unset for None and "OFF" (PyTorch's default, and a
    warm zygote must not keep a level from an earlier run), else the level as PyTorch spells it."""
    if level is None or level.upper() == "OFF":
        return {}
    return {"TORCH_DISTRIBUTED_DEBUG": level.upper()}


def interrupted_exit(signum: int = signal.SIGINT) -> int:
    """The exit code of a command ended by a signal, as a shell reports it: 130 after Ctrl-C, 143 after SIGTERM."""
    return 128 + int(signum)
