"""How well `--explore` finds the bugs that show only sometimes: the programs of tests/data/schedules/ (written blind
from bug reports, each with a correct twin; its README says how), each explored as a user would explore it.

    python benchmarks/schedule_cases.py [--k 16] [--replays 10] [--only 01,05] [--write scores.json]
    python benchmarks/schedule_cases.py --manifest tests/data/any_source/MANIFEST.json   # another set

For each broken program: does `--explore K` find a failure, with which seed, and does `--replay SEED` fail the same
way (the same outcome: verdict, kind, culprits) in each of --replays runs. For each fixed twin: do all K schedules
pass with no contract warning. The summary gives both counts, and the seconds each exploration took.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SET = os.path.join(REPO, "tests", "data", "schedules")


def entries(only: list[str], manifest: str | None = None) -> list[dict]:
    """The pairs of a set's MANIFEST.json (by default tests/data/schedules'), each with "dir", where its files are."""
    manifest = manifest or os.path.join(SET, "MANIFEST.json")
    with open(manifest) as f:
        every = json.load(f)
    return [{**e, "dir": os.path.dirname(os.path.abspath(manifest))} for e in every
            if not only or any(e["broken"].startswith(o) for o in only)]


# the set-ordered program runs with one seed for every rank (as under torchrun with PYTHONHASHSEED set), so that
# its first run passes and the exploration's own string-hash seeds are what shows it
ONE_SEED = {"13_set_order_collectives": {"PYTHONHASHSEED": "0"}}


def explore_file(path: str, n: int, k: int):
    from sandbox import explore, run_script

    env = next((v for key, v in ONE_SEED.items() if os.path.basename(path).startswith(key)), None)
    start = explore.started(lambda env: run_script(path, world_size=n, env=env, warm=True, timeout=60), env)
    return explore.explore(start, k, every=False), start


def score(e: dict, k: int, replays: int) -> dict:
    from sandbox import explore

    n = e["world_size"]
    t0 = time.monotonic()
    found, start = explore_file(os.path.join(e["dir"], e["broken"]), n, k)
    took = time.monotonic() - t0
    out = {"broken": e["broken"], "kind": e.get("kind"), "explore_s": round(took, 1), "found": not found.ok,
           "baseline_failed": not found.baseline.ok}
    failed = found.failed
    if failed and failed[0] is not None:
        schedule, res = failed
        out.update(seed=schedule.seed, schedule=schedule.words(), outcome=explore.outcome(res))
        same = sum(explore.outcome(explore.replay(start, schedule.seed)[1]) == out["outcome"] for _ in range(replays))
        out["replayed_same"] = f"{same}/{replays}"
    elif failed:
        out["outcome"] = explore.outcome(failed[1])
    t0 = time.monotonic()
    twin, _ = explore_file(os.path.join(e["dir"], e["fixed"]), n, k)
    out["fixed_explore_s"] = round(time.monotonic() - t0, 1)
    out["fixed_passes"] = twin.ok and len(twin.runs) == k
    out["fixed_warnings"] = sum(len(r.warnings) for _, r in twin.runs) + len(twin.baseline.warnings)
    if not twin.ok:
        out["fixed_outcome"] = twin.summary()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=16)
    p.add_argument("--replays", type=int, default=10)
    p.add_argument("--only", default="", help="comma-separated file-name prefixes (01,05)")
    p.add_argument("--write", metavar="FILE")
    p.add_argument("--manifest", metavar="FILE", help="another list of pairs (default: the set's MANIFEST.json)")
    a = p.parse_args(argv)
    sys.path.insert(0, REPO)
    rows = []
    for e in entries([s for s in a.only.split(",") if s], a.manifest):
        r = score(e, a.k, a.replays)
        rows.append(r)
        print(f"{r['broken']:45} found={r['found']!s:5} {r.get('outcome', '-'):40} seed={r.get('seed', '-')!s:3} "
              f"replay={r.get('replayed_same', '-'):6} twin={'passes' if r['fixed_passes'] else 'FAILS'}"
              f" warnings={r['fixed_warnings']} ({r['explore_s']} s, {r['fixed_explore_s']} s)", flush=True)
    found = sum(r["found"] and not r["baseline_failed"] for r in rows)
    twins = sum(r["fixed_passes"] and not r["fixed_warnings"] for r in rows)
    print(f"\n{len(rows)} pairs: broken found by --explore {a.k} {found}/{len(rows)} (failing unperturbed: "
          f"{sum(r['baseline_failed'] for r in rows)}); fixed twins passing every schedule without a warning "
          f"{twins}/{len(rows)}")
    if a.write:
        with open(a.write, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
