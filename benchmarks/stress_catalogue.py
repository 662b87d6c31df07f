"""Stress the bug catalogue: run every variant of every bug K times (default 20) and count how often it behaved
as documented. Not part of the test run: `python benchmarks/stress_catalogue.py [--repeat K] [slug ...]`."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sandbox.bugs import registry, run_variant  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("slugs", nargs="*")
    a = p.parse_args()
    bugs = registry()
    t0 = time.monotonic()
    print(f"{'bug':16} {'variant':8} {'as documented':>14} {'median s':>9}  failures")
    for slug in a.slugs or [s for s, b in bugs.items() if b.needs != "gpu"]:
        for variant in ("broken", "fixed"):
            good, walls, fails = 0, [], {}
            for _ in range(a.repeat):
                res, ok, why = run_variant(bugs[slug], variant, bugs[slug].world_size)
                good += ok
                walls.append(res.wall_s)
                if not ok:
                    key = "; ".join(why)[:100]
                    fails[key] = fails.get(key, 0) + 1
            walls.sort()
            print(f"{slug:16} {variant:8} {good:>8}/{a.repeat:<5} {walls[len(walls) // 2]:>9.2f}  {fails or ''}",
                  flush=True)
    print(f"total {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
