"""Run every correct long program under load, K times each, and count the OKs.

    .venv/bin/python benchmarks/correct_long_stress.py            # K=10, 2 busy loops
    .venv/bin/python benchmarks/correct_long_stress.py -k 3 --full

Every script in tests/data/correct_long/ is a correct program (see
tests/test_correct_long.py); each run is `python -m sandbox.run -n N script`
with BUSY busy loops (`python -c "while 1: pass"`) running beside it, started
before the first run and killed at the end, whatever happens. Prints, per
script, how many runs were OK and the headline of each that was not (with
--full, its whole output). Exit code 1 if any run was not OK.
"""
import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_correct_long import SCRIPTS, headline, run_sandbox  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", type=int, default=10, help="runs per script (default 10)")
    ap.add_argument("--busy", type=int, default=2, help="busy loops beside the runs (default 2)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per run (default 120)")
    ap.add_argument("--only", nargs="*", default=None, help="script stems to run (default: all)")
    ap.add_argument("--full", action="store_true", help="print the whole output of every run not OK")
    args = ap.parse_args(argv)

    scripts = [s for s in SCRIPTS if args.only is None or s.stem in args.only]
    busy = []

    def on_term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    results = {}
    t0 = time.monotonic()
    try:
        for _ in range(args.busy):
            busy.append(subprocess.Popen([sys.executable, "-c", "while 1: pass"]))
        for script in scripts:
            ok, bad = 0, []
            for i in range(args.k):
                t = time.monotonic()
                rc, out = run_sandbox(script, timeout=args.timeout)
                good = rc == 0 and any(l.startswith("OK: ") for l in out.splitlines())
                dt = time.monotonic() - t
                print(f"  {script.stem} run {i + 1}/{args.k}: {'ok' if good else 'NOT OK'} "
                      f"(rc {rc}, {dt:.1f} s) {headline(out)}", flush=True)
                if good:
                    ok += 1
                else:
                    bad.append((i + 1, rc, out))
            results[script.stem] = (ok, bad)
    finally:
        for p in busy:
            p.kill()
        for p in busy:
            p.wait()

    print(f"\n{len(scripts)} scripts x {args.k} runs with {args.busy} busy loops, "
          f"{time.monotonic() - t0:.0f} s")
    any_bad = False
    for stem, (ok, bad) in results.items():
        print(f"{stem:24s} {ok}/{ok + len(bad)} OK")
        for i, rc, out in bad:
            any_bad = True
            print(f"    run {i}: exit code {rc}: {headline(out)}")
            if args.full:
                print("    --- full output ---")
                print("\n".join("    " + l for l in out.splitlines()))
                print("    ---")
    return 1 if any_bad else 0


if __name__ == "__main__":
    sys.exit(main())
