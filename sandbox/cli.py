"""What the command lines (`python -m sandbox.run`, `python -m sandbox.repro`) share: how bad input is answered,
how numbers and debug levels are read, `-v`, and what Ctrl-C does.

A user's mistake is one sentence and exit code 2, never a usage dump or a traceback; Ctrl-C anywhere is one line
and exit code 130. Nothing here imports torch, so `--help` and usage errors answer at once.
"""
from __future__ import annotations

import argparse
import logging
import math
import sys
from typing import Callable

DEBUG_LEVELS = ("DETAIL", "INFO", "OFF")  # TORCH_DISTRIBUTED_DEBUG's values, in PyTorch's own spelling
INTERRUPTED = 130                         # 128 + SIGINT, what a shell reports for Ctrl-C


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one sentence on stderr and exit code 2."""

    def error(self, message):
        print(f"{self.prog}: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def positive_int(text: str) -> int:
    """A count (of ranks): a whole number, at least 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return v


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
                   help="show the sandbox's own steps (start, fork, hang rule, stacks, teardown) on stderr")


def setup_logging(verbose: bool) -> None:
    """With -v, the INFO lines of the `sandbox.*` loggers go to stderr as 'sandbox: ...'. The handler sits on the
    `sandbox` logger, not the root, so other libraries' records keep their own level and are not labelled ours."""
    if not verbose:
        return
    log = logging.getLogger("sandbox")
    if not any(getattr(h, "sandbox_cli", False) for h in log.handlers):  # once, however often it is called
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("sandbox: %(message)s"))
        handler.sandbox_cli = True
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False  # shown once, here, even where the root logger has a handler too


def guarded(main: Callable[[], int], prog: str) -> int:
    """Run a command's main: Ctrl-C at any moment is one line and exit code 130, not a traceback."""
    try:
        return main()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted.", file=sys.stderr)
        return INTERRUPTED
