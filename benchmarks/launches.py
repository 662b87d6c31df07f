"""How many Python processes a command starts, by what they are: a count of the suite's launches.

    python benchmarks/launches.py -- -m pytest -q -n 2 -m "not slow"
    python benchmarks/launches.py --json out.json --cwd ../old-checkout -- -m pytest -q -n 2

Runs `python ARGS...` (this interpreter) with a one-line `.pth` hook put in this environment's site-packages for
the command's length: every interpreter of this environment that starts meanwhile (pytest's workers, the CLI
subprocesses, the zygotes, Jupyter kernels, torchrun's agents and workers, mkdocs) appends its pid and command line
to a file named by COUNT_STARTS. The hook is removed afterwards, whatever happens (Ctrl-C included), and it does
nothing in an interpreter where COUNT_STARTS is not set. Ranks forked from a zygote are not interpreter starts and
are not counted: what a launch costs is its `import torch`, which a fork does not repeat.

Each start is put in one kind by its command line (`kind`); the table lists the kinds, most first, and the total.
The command's own exit status is this script's.

benchmarks/launches/ keeps the suite's counts: `before-*` from the commit this count was first made for (206fc79,
the suite before issue 28) and `after-*` now, each tier on the 64-core GPU host (torch 2.11, `-n 32`, without the
notebook packages or network namespaces, so the labs, the site and the simulated nodes skip there), and `after-*`
on the 2-core machine CI uses (`-n 2`, everything runs).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import site
import subprocess
import sys
import tempfile

HOOK_NAME = "zz_dist_sandbox_count_launches.pth"
# one line, run by `site` at every start of this environment's interpreter (a .pth line that begins with `import`)
HOOK = ("import os; _f = os.environ.get('COUNT_STARTS'); _f and open(_f, 'a').write("
        "str(os.getpid()) + '\\t' + open('/proc/self/cmdline', 'rb').read().decode(errors='replace')"
        ".replace('\\n', ' ').replace('\\0', '\\x1f').replace('\\t', ' ') + '\\t' + "
        "os.environ.get('PYTEST_CURRENT_TEST', '') + '\\n')\n")

KINDS = [  # (kind, pattern on the command line with its arguments joined by spaces); the first that matches
    ("pytest worker (xdist)", r"-c import sys;exec\(eval\(sys\.stdin\.readline"),
    ("pytest", r"(^| )-m pytest|/pytest( |$)"),
    ("zygote", r"sandbox\._zygote|sandbox\.warm"),
    ("jupyter kernel", r"ipykernel_launcher|ipykernel"),
    ("jupyter kernel's stand-in (the kernel is forked)", r"kernel_zygote\.py kernel"),
    ("kernel server (forks the labs' kernels)", r"kernel_zygote\.py serve"),
    ("torchrun agent", r"torch\.distributed\.run|/torchrun( |$)"),
    ("torchrun worker (sandbox.trace)", r"-m sandbox\.trace"),
    ("torchrun worker (fr_dump)", r"fr_dump\.py"),
    ("mkdocs", r"-m mkdocs|/mkdocs( |$)"),
]


def kind(cmdline: str) -> str:
    for name, pattern in KINDS:
        if re.search(pattern, cmdline):
            return name
    m = re.search(r"-m (sandbox(?:\.\w+)+)", cmdline)
    if m:
        return f"CLI: python -m {m.group(1)}"
    m = re.search(r"python[\d.]* (?:-\w+ )*(\S+\.py)", cmdline)
    if m:
        return f"script: {os.path.basename(m.group(1))}"
    if re.search(r"python[\d.]* (?:-\w+ )*-c ", cmdline):
        return "python -c (a test's own snippet)"
    return "other: " + cmdline[:60]


def read(log: str) -> dict:
    """pid -> (command line, the test that started it: PYTEST_CURRENT_TEST's node id, "" outside a test)."""
    seen: dict[str, tuple] = {}
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            pid, cmd, test = (line.rstrip("\n").split("\t") + ["", ""])[:3]
            # a pid once: a .pth can run twice per start
            seen.setdefault(pid, (cmd.replace("\x1f", " ").strip(), test.rsplit(" (", 1)[0]))
    return seen


def count(log: str) -> collections.Counter:
    return collections.Counter(kind(c) for c, _ in read(log).values())


def by_test(log: str) -> collections.Counter:
    """Launches per test (its node id; a process started by another inherits its test)."""
    return collections.Counter(t or "(outside any test)" for _, t in read(log).values())


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the counts here")
    ap.add_argument("--cwd", default=".", help="run the command in this directory (default: here)")
    ap.add_argument("--by-test", type=int, default=0, metavar="N",
                    help="also list the N tests that started the most processes (a pytest command)")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then python's arguments")
    ns = ap.parse_args(argv)
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    if not args:
        ap.error("give the command after --, e.g. -- -m pytest -q")
    hook = os.path.join(site.getsitepackages()[0], HOOK_NAME)
    fd, log = tempfile.mkstemp(prefix="launches-", suffix=".log")
    os.close(fd)
    try:
        with open(hook, "w") as f:
            f.write(HOOK)
        rc = subprocess.call([sys.executable, *args], cwd=ns.cwd, env=dict(os.environ, COUNT_STARTS=log))
        counts, tests = count(log), by_test(log)
    finally:
        for p in (hook,):
            if os.path.exists(p):
                os.remove(p)
    try:
        print(f"\n{'launches':>8}  kind")
        for k, n in counts.most_common():
            print(f"{n:>8}  {k}")
        print(f"{sum(counts.values()):>8}  total")
        if ns.by_test:
            print(f"\n{'launches':>8}  test (the {ns.by_test} that started the most)")
            for t, n in tests.most_common(ns.by_test):
                print(f"{n:>8}  {t}")
        if ns.json:
            with open(ns.json, "w") as f:
                json.dump({"command": args, "cwd": os.path.abspath(ns.cwd), "exit": rc, "counts": dict(counts),
                           "total": sum(counts.values()), "by_test": dict(tests.most_common())}, f, indent=1)
    finally:
        os.remove(log)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
