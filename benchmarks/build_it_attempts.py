"""How well the build-it labs' checks (labs 20-26) tell a right attempt from a wrong one, on attempts written blind:
`tests/data/build_it_attempts/`, made from the labs' text and PyTorch's documentation by someone who had not read the
checks (its README says how). Each attempt is run through its lab's own check, called as the notebook calls it, at
the notebook's world size and at each world size its MANIFEST.json gives.

    python benchmarks/build_it_attempts.py [--only lab20,lab25] [--sizes notebook|all] [--write scores.json]

A wrong attempt is rejected at a size when the check does not say right there; a correct one accepted when it does.
The summary gives, for the notebook's size alone and for every size listed, how many wrong attempts were rejected
and how many correct ones accepted at each size.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SET = os.path.join(REPO, "tests", "data", "build_it_attempts")


def _checks() -> dict:
    """task -> (the notebook's world size, or sizes, and check(fn, n) as the notebook calls it, for that task)."""
    from sandbox import lab
    from sandbox.course import data_parallel as dp
    from sandbox.course import pipeline as pp
    from sandbox.course import ring
    from sandbox.course import sharding as sh
    from sandbox.course import tensor_parallel as tp

    return {
        "my_ring_all_reduce": ((4, 3, 8), lambda fn, n: lab.check(ring.run_on_rank, n=n, args=(fn,),
                                                                  reference=ring.reference, rules=[ring.is_a_ring()],
                                                                  show=False)),
        "my_naive": ((4, 3, 8), lambda fn, n: lab.check(fn, n=n, reference=dp.reference,
                                                        rules=[dp.COMMUNICATES, dp.BEFORE_STEP], show=False)),
        "my_bucketed": ((4, 3, 8), lambda fn, n: lab.check(fn, n=n, reference=dp.reference, rules=[dp.OVERLAP],
                                                           show=False)),
        "my_zero": ((4, 3, 8), lambda fn, n: lab.check(fn, n=n, reference=sh.reference, rules=[sh.SCATTERS, sh.STATE],
                                                       show=False)),
        "my_fsdp": ((4, 3, 8), lambda fn, n: lab.check(fn, n=n, reference=sh.reference,
                                                       rules=[sh.REGATHER, sh.FREES, sh.SCATTERS], show=False)),
        "my_forward": (tp.SIZES, lambda fn, n: tp.check(fn, "forward", n=n, show=False)),
        "my_mlp": (tp.SIZES, lambda fn, n: tp.check(fn, "mlp", n=n, show=False)),
        # the notebook's call: on 4 stages with two m, then on 3 (pp.CASES); another n: that n with the same m
        "my_gpipe": (4, lambda fn, n: pp.check(fn, "gpipe", n=None if n == 4 else n, show=False)),
        "my_1f1b": (4, lambda fn, n: pp.check(fn, "1f1b", n=None if n == 4 else n, show=False)),
    }


# the class a learner writes, and the function of the notebook's cell that hands it to the course's code
CLASSES = {"MyBuckets": "my_bucketed", "MyGathered": "my_fsdp"}


def _task(entry: dict, checks: dict) -> str | None:
    task = entry.get("task") or ""
    for name in checks:
        if name in task:
            return name
    return next((fn for cls, fn in CLASSES.items() if cls in task), None)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/build_it_attempts.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="", help="comma-separated file-name prefixes (e.g. lab20,lab25_wrong)")
    p.add_argument("--sizes", choices=["notebook", "all"], default="all")
    p.add_argument("--write", metavar="JSON", help="write every attempt's outcome here")
    a = p.parse_args(argv)
    with open(os.path.join(SET, "MANIFEST.json")) as f:
        manifest = json.load(f)
    only = [s for s in a.only.split(",") if s]
    os.environ["PYTHONPATH"] = SET + os.pathsep + os.environ.get("PYTHONPATH", "")  # the ranks import attempts by name
    sys.path.insert(0, SET)
    checks = _checks()
    rows = []
    t0 = time.time()
    for entry in manifest:
        name = entry["file"].removesuffix(".py").rpartition("/")[2]
        if only and not any(name.startswith(o) for o in only):
            continue
        task = _task(entry, checks)
        if task is None:  # lab 26's attempts are whole scripts, rebuilt from the lab's text: not the capstone's
            print(f"{name}: no check known for task {entry.get('task')!r}; skipped")
            continue
        path = os.path.join(SET, name + ".py")
        nb_n = checks[task][0]
        listed = [int(n) for n in entry.get("world_sizes") or []]
        sizes = [nb_n] + ([n for n in listed if n != nb_n] if a.sizes == "all" else [])  # the notebook's call first
        outcomes = {}
        for n in sizes:
            try:
                spec = importlib.util.spec_from_file_location(name, path)
                mod = importlib.util.module_from_spec(spec)
                sys.modules[name] = mod
                spec.loader.exec_module(mod)
                c = checks[task][1](getattr(mod, task), n)
                ok, said = bool(c.ok), f"{c.verdict}: {c.message}"
            except Exception as e:  # noqa: BLE001  an attempt that cannot even be run is not accepted
                ok, said = False, f"{type(e).__name__}: {e}"
            outcomes[str(n)] = {"accepted": ok, "said": said[:300]}
            print(f"{name:45s} n={n}: {'accepted' if ok else 'rejected'}  ({said[:100]})", flush=True)
        rows.append({"file": name, "verdict": entry["verdict"], "task": task, "outcomes": outcomes})
    right = lambda r: all(o["accepted"] for o in r["outcomes"].values())  # noqa: E731
    first = lambda r: next(iter(r["outcomes"].values()))["accepted"]  # noqa: E731
    wrong = [r for r in rows if r["verdict"] == "wrong"]
    correct = [r for r in rows if r["verdict"] == "correct"]
    print(f"\n{len(rows)} attempts in {time.time() - t0:.0f} s")
    print(f"at the notebook's world size: wrong rejected {sum(not first(r) for r in wrong)}/{len(wrong)}, "
          f"correct accepted {sum(first(r) for r in correct)}/{len(correct)}")
    if a.sizes == "all":
        print(f"at every listed size: wrong rejected {sum(not right(r) for r in wrong)}/{len(wrong)}, "
              f"correct accepted {sum(right(r) for r in correct)}/{len(correct)}")
    if a.write:
        with open(a.write, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
