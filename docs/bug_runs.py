"""The catalogue's broken variants for the docs build, several bugs in one process.

    python docs/bug_runs.py OUT_DIR SLUG [SLUG ...]

Each bug's record is what `python -m sandbox.repro SLUG --variant broken --json --timeline
OUT_DIR/bugs/SLUG/timeline.png` prints and draws (`repro.runs_json`, `repro.draw_timeline`, the command's own),
made in this process. Every run forks its ranks from one warm zygote (SANDBOX_WARM=1): torch is imported once per
batch, not once per bug. What each run gave goes to OUT_DIR/bugs/SLUG/run.json as it ends ({"rc", "stdout",
"stderr", "seconds"}), so a batch cut off by its time limit still hands over the runs it finished. docs/hooks.py
starts two batches.

Under `DOCS_BUG_RUNS=DIR` a run is `shared`: made once for every process that names the same DIR. The test session
names it for its catalogue tests and for the docs build it starts (tests/conftest.py), so a broken variant that
`test_catalogue` ran is drawn here from that run, not run again; one the build runs first, the test reads.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = "DOCS_BUG_RUNS"


def timeline(out_dir: str, slug: str) -> str:
    return os.path.join(out_dir, "bugs", slug, "timeline.png")


def record(out_dir: str, slug: str) -> str:
    return os.path.join(out_dir, "bugs", slug, "run.json")


def shared(cache: str, slug: str, variant: str = "broken"):
    """The catalogue variant's run on its documented ranks (`sandbox.bugs.run_variant`'s VariantRun), made once for
    every process asking with the same `cache` folder: the first to ask runs it, under a lock of its own, and keeps
    it there; the others wait for it and read it. A run that raised is kept by nobody: the next asker runs it."""
    import fcntl
    import pickle

    from sandbox.bugs import registry, run_variant

    os.makedirs(cache, exist_ok=True)
    kept = os.path.join(cache, f"{slug}-{variant}.pkl")
    with open(os.path.join(cache, f"{slug}-{variant}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # bounded: the holder's run has its own limit (the bug's timeout)
        if os.path.exists(kept):
            with open(kept, "rb") as f:
                return pickle.load(f)
        bug = registry()[slug]
        run = run_variant(bug, variant, bug.world_size)
        with open(kept + ".tmp", "wb") as f:
            pickle.dump(run, f)
        os.replace(kept + ".tmp", kept)
        return run


def run_one(out_dir: str, slug: str) -> dict:
    from sandbox import repro
    from sandbox.bugs import registry, run_variant

    png = timeline(out_dir, slug)
    os.makedirs(os.path.dirname(png), exist_ok=True)
    t0 = time.monotonic()
    bug, err = registry()[slug], io.StringIO()
    try:
        cache = os.environ.get(SHARED)
        run = shared(cache, slug) if cache else run_variant(bug, "broken", bug.world_size)
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
