"""A script that redirects its own stdout and stderr to files
(sys.stdout = open("stdout.log", "w"); sys.stderr = open(...)), prints its
progress with print(), and then crashes with an uncaught RuntimeError.

Plain Python at the end: the uncaught exception's traceback is written by the
default sys.excepthook to the *current* sys.stderr, i.e. the file; at
finalization Python flushes sys.stdout/sys.stderr and then the file objects
are finalized; exit code 1. So:
  stdout_rank{R}.log must hold "epoch 0 ...".."epoch 49 ..." (never flushed
    by the script, 50 short lines, all in the buffer at exit);
  stderr_rank{R}.log must hold "warning: lr schedule clipped" followed by the
    traceback: "Traceback (most recent call last):", a frame for <module>
    (line of `main()`), a frame for main, and
    "RuntimeError: CUDA out of memory (simulated)".
Only to make the bytes comparable across invocations, the stderr file object
is a thin wrapper that writes this script's own absolute path as "SCRIPT"
(tracebacks name the file by its path). Extra frames in the traceback (e.g.
from a runner) are a real, user-visible difference.

Pattern: `sys.stdout = open(log_path, "w")` / Tee-style redirection at the top
of training scripts so that cluster job logs land in the run directory.
"""
import os
import sys

OUT = os.environ["OUT_DIR"]
RANK = os.environ.get("RANK", "0")
HERE = os.path.abspath(__file__)


class _PathRedacting:
    def __init__(self, f):
        self._f = f

    def write(self, s):
        return self._f.write(s.replace(HERE, "SCRIPT"))

    def flush(self):
        self._f.flush()

    def __getattr__(self, name):
        return getattr(self._f, name)


sys.stdout = open(os.path.join(OUT, f"stdout_rank{RANK}.log"), "w")
sys.stderr = _PathRedacting(open(os.path.join(OUT, f"stderr_rank{RANK}.log"), "w"))


def main():
    for epoch in range(50):
        print(f"epoch {epoch} loss {2.0 / (epoch + 1):.5f}")
    print("warning: lr schedule clipped", file=sys.stderr)
    raise RuntimeError("CUDA out of memory (simulated)")


main()
