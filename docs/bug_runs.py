"""The catalogue's broken variants for the docs build, several bugs in one process.

    python docs/bug_runs.py OUT_DIR SLUG [SLUG ...]

Each bug is `python -m sandbox.repro SLUG --variant broken --json --timeline OUT_DIR/bugs/SLUG/timeline.png`,
answered by that command's own `main(argv)` (under `cli.guarded`, as its `__main__` runs it), with what it prints
captured. Every run forks its ranks from one warm zygote (SANDBOX_WARM=1): torch is imported once per batch, not once
per bug. What each run gave goes to OUT_DIR/bugs/SLUG/run.json as it ends ({"rc", "stdout", "stderr", "seconds"}),
so a batch cut off by its time limit still hands over the runs it finished. docs/hooks.py starts two batches.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timeline(out_dir: str, slug: str) -> str:
    return os.path.join(out_dir, "bugs", slug, "timeline.png")


def record(out_dir: str, slug: str) -> str:
    return os.path.join(out_dir, "bugs", slug, "run.json")


def run_one(out_dir: str, slug: str) -> dict:
    from sandbox import cli
    from sandbox.repro import main

    png = timeline(out_dir, slug)
    os.makedirs(os.path.dirname(png), exist_ok=True)
    out, err = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.guarded(lambda: main([slug, "--variant", "broken", "--json", "--timeline", png]),
                             "sandbox.repro")
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except Exception:  # noqa: BLE001  what the interpreter would print; the build names the bug that failed
            traceback.print_exc()
            rc = 1
    return {"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue(), "seconds": time.monotonic() - t0}


def main(argv: list[str]) -> int:
    out_dir, slugs = argv[0], argv[1:]
    for slug in slugs:
        r = run_one(out_dir, slug)
        with open(record(out_dir, slug), "w", encoding="utf-8") as f:
            json.dump(r, f)
    return 0


if __name__ == "__main__":
    os.environ["SANDBOX_WARM"] = "1"
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    sys.exit(main(sys.argv[1:]))
