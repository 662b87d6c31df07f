"""What the command lines (`python -m sandbox.run`, `repro`, `bench`, `diagnose`) share: how bad input is answered,
how numbers, debug levels and picture names are read, `-v`, what Ctrl-C does, and the one prefix of a command's
messages.

A user's mistake is one sentence and exit code 2, never a usage dump or a traceback; Ctrl-C anywhere is one line
and exit code 130. Every message a command prints starts with its name (`sandbox.run: ...`, see `name`), whoever
prints it: the parser, the command, or the Ctrl-C guard. Nothing here imports torch, so `--help` and usage errors
answer at once.
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from typing import Callable

from sandbox import defaults

DEBUG_LEVELS = ("DETAIL", "INFO", "OFF")  # TORCH_DISTRIBUTED_DEBUG's values, in PyTorch's own spelling
INTERRUPTED = defaults.interrupted_exit()  # 130: what a shell reports for Ctrl-C


def name(prog: str) -> str:
    """The prefix of every message of a command: 'sandbox.run' for the 'python -m sandbox.run' its usage shows."""
    return prog.removeprefix("python -m ").strip()


def say(prog: str, message: str) -> None:
    """One line on stderr, headed by the command's name: 'sandbox.run: no such script: x.py'."""
    print(f"{name(prog)}: {message}", file=sys.stderr)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one sentence on stderr and exit code 2. Its `prog` ('python -m
    sandbox.run') is how the usage line says to run it; its errors are headed by the command's `name`."""

    def error(self, message):
        say(self.prog, f"{message} (see --help)")
        sys.exit(2)


def _count(text: str, least: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < least:
        raise argparse.ArgumentTypeError(f"{text} must be at least {least}")
    return v


def positive_int(text: str) -> int:
    """A count (of ranks): a whole number, at least 1."""
    return _count(text, 1)


def non_negative_int(text: str) -> int:
    """A count that may be none (of restarts): a whole number, at least 0."""
    return _count(text, 0)


def add_world(p: argparse.ArgumentParser) -> None:
    """-n N (ranks on one node), or --nnodes K --nproc-per-node P (simulated nodes, torchrun's names): what
    `python -m sandbox.run` and the cell magic both take."""
    p.add_argument("-n", "--nproc", dest="n", type=positive_int, default=None, metavar="N",
                   help="number of ranks, on one node (default 2)")
    p.add_argument("--nnodes", type=positive_int, default=1, metavar="K",
                   help="simulated nodes, each its own network namespace, hostname and address (default 1; more "
                        "needs root)")
    p.add_argument("--nproc-per-node", type=positive_int, default=None, metavar="P",
                   help="ranks on each node (default 1 with --nnodes, as torchrun)")


def world(a: argparse.Namespace) -> int:
    """The number of ranks `add_world`'s options ask for: -n on one node (default 2), or K nodes of P ranks (P
    default 1, as torchrun). ValueError in one sentence for -n given with nodes."""
    if a.n is not None and (a.nnodes > 1 or a.nproc_per_node is not None):
        raise ValueError("-n is the number of ranks on one node: with --nnodes give --nproc-per-node instead")
    if a.nnodes == 1 and a.nproc_per_node is None:
        return a.n or 2
    return a.nnodes * (a.nproc_per_node or 1)


def positive_seconds(text: str) -> float:
    """A duration: a positive, finite number of seconds."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0:  # nan too
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds")
    if math.isinf(v):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number of seconds")
    return v


PICTURES = (".png", ".svg", ".pdf")  # what matplotlib writes without extra packages


def picture_path(text: str) -> str:
    """A file to save a picture in (--timeline): a .png, .svg or .pdf name in a folder that exists. Checked while the
    arguments are read, so a name that cannot be written is refused before the run, not after it."""
    ext = os.path.splitext(text)[1].lower()
    if ext not in PICTURES:
        raise argparse.ArgumentTypeError(f"wants a .png, .svg or .pdf file name, not {text!r}")
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"the folder of {text!r} does not exist ({folder})")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write in the folder of {text!r} ({folder})")
    return text


def debug_level(text: str) -> str:
    """TORCH_DISTRIBUTED_DEBUG's level in any case ('detail', 'Detail', 'DETAIL'), returned as PyTorch spells it."""
    v = text.upper()
    if v not in DEBUG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(DEBUG_LEVELS)}")
    return v


def add_common(p: argparse.ArgumentParser) -> None:
    """The options every sandbox command takes: --debug and -v."""
    p.add_argument("--debug", type=debug_level, choices=DEBUG_LEVELS,
                   help="set TORCH_DISTRIBUTED_DEBUG in the ranks (any case)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show the sandbox's own steps (start, fork, hang rule, stacks, teardown) on stderr, each "
                        "with the seconds since the start")


class _Elapsed(logging.Formatter):
    """'sandbox: +0.412 s zygote started': each line says how long after the start it came, so a reader sees where
    the seconds go. The clock starts when -v is turned on (at the start of the command, or of the cell)."""

    def __init__(self):
        super().__init__()
        self.start = time.monotonic()

    def format(self, record):
        return f"sandbox: +{time.monotonic() - self.start:.3f} s {record.getMessage()}"


def setup_logging(verbose: bool) -> None:
    """With -v, the INFO lines of the `sandbox.*` loggers go to stderr as 'sandbox: +0.412 s ...'. The handler sits
    on the `sandbox` logger, not the root, so other libraries' records keep their own level and are not labelled
    ours. Each call with -v restarts the clock (a notebook's next cell is timed from its own start)."""
    if not verbose:
        return
    log = logging.getLogger("sandbox")
    handler = next((h for h in log.handlers if getattr(h, "sandbox_cli", False)), None)
    if handler is None:  # once, however often it is called
        handler = logging.StreamHandler(sys.stderr)
        handler.sandbox_cli = True
        log.addHandler(handler)
    handler.setFormatter(_Elapsed())
    log.setLevel(logging.INFO)
    log.propagate = False  # shown once, here, even where the root logger has a handler too


def guarded(main: Callable[[], int], prog: str) -> int:
    """Run a command's main: Ctrl-C at any moment is one line and exit code 130, not a traceback."""
    try:
        return main()
    except KeyboardInterrupt:
        say(prog, "interrupted.")
        return INTERRUPTED


def answer(main: Callable[[list], int], argv: list, prog: str) -> tuple[int, str, str]:
    """A command answered in this process, as its `__main__` answers it in its own (under `guarded`), with what it
    printed captured: (exit code, stdout, stderr). A SystemExit gives its code (a message as code: printed, 1); an
    exception that escapes is printed as the interpreter prints it, exit code 1. -v's handler goes with the captured
    stderr. For callers that answer many commands in one warm process (the tests, the docs build's bug runs)."""
    import contextlib
    import io
    import traceback

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = guarded(lambda: main(argv), prog)
            except SystemExit as e:  # argparse, or a command's own exit
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if e.code is not None and not isinstance(e.code, int):
                    print(e.code, file=sys.stderr)
            except Exception:  # noqa: BLE001  what the interpreter would print for an escaped exception
                traceback.print_exc()
                code = 1
    finally:
        log = logging.getLogger("sandbox")
        log.handlers = [h for h in log.handlers if not getattr(h, "sandbox_cli", False)]
        log.setLevel(logging.NOTSET)
        log.propagate = True
    return code, out.getvalue(), err.getvalue()
