"""The `%%sandbox` cell magic: the code typed into a cell runs as a script on N ranks, and the result shows below.

    %load_ext sandbox

    %%sandbox -n 4 --timeline
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        dist.barrier()               # the others never get here: a hang, named in about a second

Options as `python -m sandbox.run`'s: -n N, --nnodes K --nproc-per-node P (K simulated nodes of P ranks each,
torchrun's names and environment; needs root), --hang-after S, --timeout S, --gpu, --debug DETAIL, --trace-dir DIR,
-v; `--timeline` shows the picture of every rank's calls under the report; `--explore K` (`--explore-all`) and
`--replay SEED` as `python -m sandbox.run`'s. The cell is a script with torchrun's
environment: it calls init_process_group itself. Call sites, tracebacks, stacks and warnings name it `<cell>`,
with the cell's own line numbers (the %%sandbox line is line 1). The RunResult is left in `_sandbox` for the next
cell. A bad option is one sentence; a cell that does not compile is its SyntaxError, once, before any rank starts;
Ctrl-C (interrupting the kernel) ends the run and shows where every rank was. Defaults: `sandbox.defaults`.
"""
from __future__ import annotations

import argparse
import dataclasses
import enum
import os
import shlex
import sys
import tempfile
import traceback

from sandbox import _paths, cli, defaults

CELL = "<cell>"
RESULT_NAME = "_sandbox"


class _BadArguments(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting: a magic must never end the kernel, nor print a traceback."""

    def error(self, message):
        raise _BadArguments(message)

    def exit(self, status=0, message=None):
        if message:
            print(message, file=sys.stderr, end="")
        raise _BadArguments(None)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="%%sandbox", description="Run this cell's code as a script on N ranks and diagnose hangs.")
    cli.add_world(p)
    p.add_argument("--timeline", action="store_true", help="show a picture of every rank's calls over time")
    p.add_argument("--gpu", action="store_true", help="one GPU per rank (NCCL); needs as many GPUs as ranks")
    p.add_argument("--hang-after", type=cli.positive_seconds, default=defaults.HANG_AFTER_S, metavar="S",
                   help="call it a hang when every live rank has been stuck this long "
                        f"(default {defaults.HANG_AFTER_S:g})")
    p.add_argument("--timeout", type=cli.positive_seconds, default=defaults.RUN_TIMEOUT_S, metavar="S",
                   help=f"stop the run after this many seconds (default {defaults.RUN_TIMEOUT_S:g})")
    p.add_argument("--trace-dir", metavar="DIR", help="keep each rank's trace, log and stack in DIR")
    p.add_argument("--explore", type=cli.positive_int, metavar="K",
                   help="run it again under K schedules a cluster could give it (sandbox.explore)")
    p.add_argument("--explore-all", action="store_true", help="with --explore: all K, every distinct outcome")
    p.add_argument("--replay", type=cli.positive_int, metavar="SEED", help="run it under the schedule of SEED")
    cli.add_common(p)
    return p


def sandbox(line: str, cell: str):
    """%%sandbox [-n N | --nnodes K --nproc-per-node P] [--timeline] [--gpu] [--hang-after S] [--timeout S]
    [--debug DETAIL] [--trace-dir DIR] [-v]

    Run the cell's code as a script on N ranks, or on K simulated nodes of P ranks (torchrun's environment: it
    calls init_process_group itself), show the verdict, the diagnosis, every rank's state and output (and with
    --timeline the picture), and leave the RunResult in `_sandbox`.
    """
    from IPython import get_ipython

    run_cell(line, cell, get_ipython())


sandbox.__doc__ += "\n" + parser().format_help()


def run_cell(line: str, cell: str, ip=None):
    """The magic's work; returns the RunResult (None after a bad option)."""
    try:
        a = parser().parse_args(shlex.split(line))
    except _BadArguments as e:
        if e.args[0]:
            print(f"%%sandbox: {e.args[0]}; %%sandbox? lists the options.", file=sys.stderr)
        return None
    except ValueError as e:  # shlex: an unclosed quote
        print(f"%%sandbox: cannot read the options ({e}).", file=sys.stderr)
        return None
    try:
        n = cli.world(a)
    except ValueError as e:
        print(f"%%sandbox: {e}; %%sandbox? lists the options.", file=sys.stderr)
        return None
    if not cell.strip():
        print("%%sandbox: the cell is empty: type the code every rank runs under the %%sandbox line.", file=sys.stderr)
        return None
    source = "\n" + cell  # one blank line for the %%sandbox line: the file's line numbers are the cell's
    bad = _syntax_error(source)
    if bad is not None:
        sys.stderr.write(bad)
        return None
    cli.setup_logging(a.verbose)

    from sandbox.lab import show_result
    from sandbox.launcher import Interrupted, UsageError, run_script

    with tempfile.TemporaryDirectory(prefix="sandbox-cell-") as d:
        path = os.path.join(d, "cell.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(source)
        try:
            if a.explore or a.replay:
                return _explore(a, n, path, ip)
            res = run_script(path, world_size=n, nnodes=a.nnodes, hang_after=a.hang_after, timeout=a.timeout,
                             gpu=a.gpu, debug=a.debug, trace_dir=a.trace_dir)
        except UsageError as e:  # one line, even where the sentence quotes a command's own output
            print(f"%%sandbox: {' '.join(str(e).split())}", file=sys.stderr)
            return None
        except Interrupted as e:  # Ctrl-C: the run is over and cleaned up; show where it was, no traceback
            res = e.result
        res = relabel(res, path, CELL)
    if ip is not None:
        ip.user_ns[RESULT_NAME] = res
    show_result(res, timeline=a.timeline)
    return res


def _explore(a, n: int, path: str, ip):
    """--explore K / --replay SEED: the summary (with the seed that replays what failed) and the run to see; the
    RunResult (for --replay) or the `Explored` is left in `_sandbox`."""
    from IPython.display import display

    from sandbox import explore
    from sandbox.lab import show_result
    from sandbox.launcher import UsageError, run_script

    if a.nnodes > 1 or (a.explore and a.replay) or (a.explore_all and not a.explore):
        raise UsageError("--explore K (with --explore-all) or --replay SEED, on one node.")
    start = explore.started(lambda env: run_script(path, world_size=n, hang_after=a.hang_after, timeout=a.timeout,
                                                   gpu=a.gpu, debug=a.debug, env=env))
    if a.replay:
        schedule, res = explore.replay(start, a.replay)
        print(f"schedule {a.replay}: {schedule.words()}")
        shown = relabel(res, path, CELL)
        show_result(shown, timeline=a.timeline)
    else:
        shown = relabel(explore.explore(start, a.explore, every=a.explore_all, jobs=1 if a.gpu else explore.JOBS),
                        path, CELL)
        display(shown)
    if ip is not None:
        ip.user_ns[RESULT_NAME] = shown
    return shown


def _syntax_error(source: str) -> str | None:
    """The cell's SyntaxError as Python shows it (`File "<cell>", line 3`), or None when it compiles: found here,
    before any rank starts, not N times inside the ranks."""
    try:
        compile(source, CELL, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:  # ValueError: null bytes, on Pythons older than 3.12
        return "".join(traceback.format_exception_only(type(e), e))
    return None


def relabel(res, path: str, label: str):
    """The result with every mention of the cell's temporary file replaced by `label`, wherever it is: call sites,
    tracebacks, stacks, the diagnosis, the contract warnings, the events, the output (the file is gone once the run
    is over). Results are frozen: this builds changed copies, field by field, with dataclasses.replace."""
    # as the sandbox may show it: whole, resolved, or relative (to the project or the working directory), the
    # longest first, so no name is left half-replaced
    names = sorted({path, os.path.realpath(path), _paths.shown_path(path), os.path.relpath(path)} - {"."},
                   key=len, reverse=True)

    def fix(x):
        if isinstance(x, enum.Enum):  # a verdict or an outcome: a string, but one of a closed set
            return x
        if isinstance(x, str):
            for name in names:
                x = x.replace(name, label)
            return x
        if isinstance(x, dict):
            return {fix(k): fix(v) for k, v in x.items()}
        if isinstance(x, list):
            return [fix(v) for v in x]
        if type(x) is tuple:  # a named tuple would want its fields by name: none in a result carries a path
            return tuple(fix(v) for v in x)
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return dataclasses.replace(x, **{f.name: fix(getattr(x, f.name)) for f in dataclasses.fields(x)
                                             if f.init and f.name != "value_bytes"})
        return x

    return fix(res)


def load(ip) -> None:
    ip.register_magic_function(sandbox, magic_kind="cell", magic_name="sandbox")


def unload(ip) -> None:
    ip.magics_manager.magics["cell"].pop("sandbox", None)
