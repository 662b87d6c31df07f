"""The catalogue's broken variants for the docs build, several bugs in one process.

    python docs/bug_runs.py OUT_DIR SLUG [SLUG ...]

Each bug is `python -m sandbox.repro SLUG --variant broken --json --timeline OUT_DIR/bugs/SLUG/timeline.png`,
answered by that command's own `main(argv)` in this process (`cli.answer`, as its `__main__` answers it), with what
it prints captured. Every run forks its ranks from one warm zygote (SANDBOX_WARM=1): torch is imported once per
batch, not once per bug. What each run gave goes to OUT_DIR/bugs/SLUG/run.json as it ends ({"rc", "stdout", "stderr", "seconds"}),
so a batch cut off by its time limit still hands over the runs it finished. docs/hooks.py starts two batches.
"""
from __future__ import annotations

import json
import os
import sys
import time

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
    t0 = time.monotonic()
    rc, out, err = cli.answer(main, [slug, "--variant", "broken", "--json", "--timeline", png], "sandbox.repro")
    return {"rc": rc, "stdout": out, "stderr": err, "seconds": time.monotonic() - t0}


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
