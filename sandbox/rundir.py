"""The run directory's layout, said once: what every file a run (or torchrun's workers under `sandbox.trace`) writes
there is called. The ranks write their files by these names, the launchers and `python -m sandbox.diagnose` read
them by these names, and a kept `--trace-dir` is emptied of exactly these before a run reuses it.

    meta.json              the trace format and its version (`sandbox.events`)
    rank-<R>.jsonl         rank R's trace: one event a line
    rank-<R>.log           what rank R printed (stdout and stderr)
    stack-<R>.txt          rank R's Python stacks, dumped by faulthandler when asked (SIGUSR1) or ended
    fr-<R>.pkl             rank R's Flight Recorder dump (`sandbox.flight`)
    result-<R>.pkl         rank R's return value (a function's, or a catalogue variant's under torchrun)
    spec.pkl, zygote.log   the sandbox's launcher: what the zygote runs, and what it said
    ended.json             what the launcher knew of the ranks' ends (why it stopped the run, each rank's pid, exit
                           status and whether the launcher ended it): `sandbox.diagnose` judges from the same facts
    agent-node<I>.log      torchrun's launcher: the agent's own log on node I, restarts included
    torchelastic-<HOST>/   torchrun's launcher: the agent's own files (its --log-dir)
    attempts/<K>/          torchrun's earlier attempts, moved there by each restarted worker

Torch-free and import-light: the ranks import it before anything else.
"""
from __future__ import annotations

import json
import os
import re

META = "meta.json"
ENDED = "ended.json"
SPEC = "spec.pkl"
ZYGOTE_LOG = "zygote.log"
ATTEMPTS = "attempts"

TRACE = re.compile(r"rank-(\d+)\.jsonl")
FLIGHT = re.compile(r"fr-(\d+)\.pkl")
# a rank's own files, which a restarted torchrun worker moves to attempts/<k>/ (its value is written at its end)
RANK_FILES = ("rank-{r}.jsonl", "fr-{r}.pkl", "stack-{r}.txt", "rank-{r}.log")
# every file a run writes into its directory, and its folders: a fresh run removes stale ones, which would be
# read as its own
RUN_FILE = re.compile(r"(rank-\d+\.(jsonl|log)|stack-\d+\.txt|result-\d+\.pkl|fr-\d+\.pkl|zygote\.log|spec\.pkl"
                      r"|meta\.json|ended\.json|agent-node\d+\.log)")
RUN_DIRS = re.compile(r"attempts|torchelastic-node\d+")


def trace(d: str, rank: int) -> str:
    return os.path.join(d, f"rank-{rank}.jsonl")


def log(d: str, rank: int) -> str:
    return os.path.join(d, f"rank-{rank}.log")


def stack(d: str, rank: int) -> str:
    return os.path.join(d, f"stack-{rank}.txt")


def flight(d: str, rank: int) -> str:
    return os.path.join(d, f"fr-{rank}.pkl")


def result(d: str, rank: int) -> str:
    return os.path.join(d, f"result-{rank}.pkl")


def agent_log(d: str, node: int) -> str:
    return os.path.join(d, f"agent-node{node}.log")


def agent_dir(d: str, hostname: str) -> str:
    return os.path.join(d, f"torchelastic-{hostname}")


def attempt(d: str, k: int) -> str:
    return os.path.join(d, ATTEMPTS, str(k))


def ranks_with(d: str, pattern: re.Pattern) -> dict[int, str]:
    """rank -> path of every file in `d` whose name matches `pattern` (TRACE, FLIGHT), in name order."""
    out = {}
    for name in sorted(os.listdir(d)):
        m = pattern.fullmatch(name)
        if m:
            out[int(m.group(1))] = os.path.join(d, name)
    return out


def write_ended(d: str, stopped_for: str | None, tracks: dict) -> None:
    """The launcher's facts of each rank's end, beside its trace (see ENDED)."""
    facts = {str(r): {"pid": t.pid, "exit_code": t.exit_code, "ended_by_sandbox": t.ended_by_sandbox}
             for r, t in tracks.items()}
    with open(os.path.join(d, ENDED), "w", encoding="utf-8") as f:
        json.dump({"stopped_for": stopped_for, "ranks": facts}, f)


def read_ended(d: str, tracks: dict) -> str | None:
    """Put the launcher's facts of each rank's end (ENDED) on `tracks`, where it left them; returns why it stopped
    the run (None: it did not, or the directory has no such file: a job run by another launcher)."""
    try:
        with open(os.path.join(d, ENDED), encoding="utf-8") as f:
            ended = json.load(f)
    except (FileNotFoundError, ValueError):  # none (torchrun's job, an older run), or cut short: the files alone
        return None
    for r, fact in ended.get("ranks", {}).items():
        t = tracks.get(int(r))
        if t is not None:
            t.pid, t.exit_code, t.ended_by_sandbox = fact["pid"], fact["exit_code"], fact["ended_by_sandbox"]
    return ended.get("stopped_for")
