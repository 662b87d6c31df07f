"""The catalogue's broken variants for the docs build, several bugs in one process.

    python docs/bug_runs.py OUT_DIR SLUG [SLUG ...]

Each bug's record is what `python -m sandbox.repro SLUG --variant broken --json --timeline
OUT_DIR/bugs/SLUG/timeline.png` prints and draws (`repro.runs_json`, `repro.draw_timeline`, the command's own),
made in this process. Every run forks its ranks from one warm zygote (SANDBOX_WARM=1): torch is imported once per
batch, not once per bug. What each run gave goes to OUT_DIR/bugs/SLUG/run.json as it ends ({"rc", "stdout",
"stderr", "seconds"}), so a batch cut off by its time limit still hands over the runs it finished. docs/hooks.py
starts two batches.

Under `SANDBOX_SHARED_RUNS=DIR` a run is shared (`sandbox.bugs.shared_run`): made once for every process that names
the same DIR. The test session names it for its catalogue tests, the labs it executes and the docs build it starts
(tests/conftest.py), so a broken variant that `test_catalogue` or a lab ran is drawn here from that run, not run
again; one the build runs first, the others read.
"""
from __future__ import annotations

import contextlib
import io
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
    from sandbox import repro
    from sandbox.bugs import SHARED_RUNS_ENV, registry, run_variant, shared_run

    png = timeline(out_dir, slug)
    os.makedirs(os.path.dirname(png), exist_ok=True)
    t0 = time.monotonic()
    bug, err = registry()[slug], io.StringIO()
    try:
        cache = os.environ.get(SHARED_RUNS_ENV)
        run = shared_run(cache, bug) if cache else run_variant(bug, "broken", bug.world_size)
        with contextlib.redirect_stderr(err):
            repro.draw_timeline(run.result, png)
    except Exception as e:  # noqa: BLE001  the page says the run failed, with this; the build goes on
        return {"rc": 2, "stdout": "", "stderr": f"sandbox.repro: {type(e).__name__}: {e}",
                "seconds": time.monotonic() - t0}
    return {"rc": 0 if run.as_documented else 1, "stdout": json.dumps(repro.runs_json(bug, [("broken", run)])),
            "stderr": err.getvalue(), "seconds": time.monotonic() - t0}


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
