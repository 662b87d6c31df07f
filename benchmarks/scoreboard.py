"""How good is the diagnosis? Every program of the labelled corpus (benchmarks/corpus/) and its correct twin, run
under each tool with a wall limit, and each tool's report scored against the label.

    python benchmarks/scoreboard.py                      # the whole corpus, all four tools: the table
    python benchmarks/scoreboard.py --quick              # a few cases of different families (minutes)
    python benchmarks/scoreboard.py --json --cases mismatch_op_logger_gather --tools sandbox,detail
    python benchmarks/scoreboard.py --write benchmarks/scoreboard.json   # what the site's page reads
    python benchmarks/scoreboard.py --gpu --write benchmarks/scoreboard-nccl.json   # NCCL, one GPU per rank

Tools: `sandbox` (python -m sandbox.run --json), `torchrun` (plain), `detail` (TORCH_DISTRIBUTED_DEBUG=DETAIL),
`flight` (the Flight Recorder, then torchfrtrace on the dumps). How each tool's output is read:
benchmarks/scoring/parsers.py; the rules: benchmarks/scoring/score.py. Runs go --jobs at a time (most of a hang's
run is sleeping); each has its own temporary directory, removed after it, and its processes are ended at the limit
and on Ctrl-C. Progress, one line per finished run, goes to stderr; the table (or --json) to stdout.
Exit code 0 when every run was scored, 2 on a usage error, 130/143 when interrupted.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.scoring import corpus, parsers, score, table, tools  # noqa: E402

PROG = "scoreboard"
# --quick: one case that crashes (all_to_all splits: gloo aborts), one that hangs (a send/send cycle), one that
# finishes with a contract breach (the group never destroyed), one under DDP; all of two ranks, so it is quick
QUICK = ("a2a_moe_local_splits", "p2p_cycle_kv_swap", "finishes_not_destroyed", "ddp_model_rank0_head")


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one sentence and exit code 2, not a usage dump
        print(f"{PROG}: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def _positive(kind):
    def read(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"{text} must be more than 0")
        return v
    return read


def parser() -> Parser:
    p = Parser(prog="python benchmarks/scoreboard.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    p.add_argument("--json", action="store_true", help="print the JSON document instead of the table")
    p.add_argument("--cases", help="comma-separated case names (default: all)")
    p.add_argument("--tools", default=",".join(tools.TOOLS), help=f"comma-separated, of {', '.join(tools.TOOLS)}")
    p.add_argument("--limit", type=_positive(float), default=60.0, metavar="S", help="wall limit of a run (60)")
    p.add_argument("--jobs", type=_positive(int), default=3, metavar="N", help="runs at once (3)")
    p.add_argument("--keep", metavar="DIR", help="keep every run's raw output in DIR/<case>/<variant>/<tool>/")
    p.add_argument("--write", metavar="FILE", help="also save the JSON document in FILE")
    p.add_argument("--gpu", action="store_true", help="NCCL, one GPU per rank: the cases marked `nccl: yes` that fit")
    p.add_argument("--corpus", default=corpus.CORPUS, metavar="DIR", help=argparse.SUPPRESS)  # the tests' own cases
    return p


def _gpus() -> tuple[int, str]:
    """(visible GPUs, the first one's name), asked of torch in a child process (CUDA stays out of this one)."""
    code = "import torch; n = torch.cuda.device_count(); print(n); print(torch.cuda.get_device_name(0) if n else '')"
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        out = p.stdout.split("\n")
        return int(out[0]), out[1].strip()
    except (subprocess.TimeoutExpired, ValueError, IndexError):  # no answer: as good as no GPU, said by the caller
        return 0, ""


def choose(a, p) -> tuple[list, list[str], int, str]:
    """(cases, tools, GPUs, GPU name) the arguments ask for; every mistake is one sentence and exit code 2."""
    names = [t for t in a.tools.split(",") if t]
    bad = [t for t in names if t not in tools.TOOLS]
    if bad or not names:
        p.error(f"unknown tool {bad[0] if bad else '(none given)'!r}: the tools are {', '.join(tools.TOOLS)}")
    if a.quick and a.cases:
        p.error("give --quick or --cases, not both")
    if not os.path.isdir(a.corpus):
        p.error(f"no corpus folder {a.corpus}")
    if a.write and not os.path.isdir(os.path.dirname(os.path.abspath(a.write))):
        p.error(f"--write {a.write}: its folder does not exist")  # said now, not after minutes of runs
    if a.keep and os.path.exists(a.keep) and not os.path.isdir(a.keep):
        p.error(f"--keep {a.keep} is a file, not a folder")
    cases, problems = corpus.load(a.corpus)
    wanted = list(QUICK) if a.quick else list(dict.fromkeys(c for c in (a.cases or "").split(",") if c))
    wanted = wanted or sorted({*cases, *problems})
    for w in wanted:
        if w in problems:
            p.error(f"case {w} is not well formed: {problems[w][0]}")
        if w not in cases:
            where = " (in the --quick list)" if a.quick else ""
            p.error(f"unknown case {w!r}{where}: no {w}.py in {a.corpus}")
    for name, why in problems.items():
        if name not in wanted:
            print(f"{PROG}: skipping {name}: {why[0]}", file=sys.stderr)
    chosen = [cases[w] for w in wanted]
    n, gpu = (0, "")
    if a.gpu:
        n, gpu = _gpus()
        chosen = [c for c in chosen if c.nccl and c.world <= n]
        if not chosen:
            p.error(f"--gpu: none of these cases runs on NCCL with the {n} GPUs visible here")
    return chosen, names, n, gpu


def _record(case, variant, tool, got: tools.ToolRun) -> dict:
    report = parsers.of_run(got, case.file(variant))
    if not report.reported:
        said_at = None
    elif tool == "sandbox":  # its verdict is its JSON, printed when it is done
        said_at = max((s for s, w, _ in got.main.lines if w == "out"), default=None)
    elif tool == "flight":  # the job, then the analysis of its dumps
        said_at = got.main.wall_s + sum(c.wall_s for c in got.frtrace)
    else:
        said_at = got.main.at(report.said)
    verdict, helpful = score.verdict(case, variant, report)
    seconds = said_at if said_at is not None else got.main.wall_s  # not reported: how long the run went on
    return {"case": case.name, "variant": variant, "tool": tool, "outcome": got.outcome, **report.to_json(),
            "seconds": round(seconds, 2), "verdict": verdict, "helpful": helpful}


def run_all(cases, names, a) -> list[dict]:
    """Every (case, variant, tool), --jobs at a time; a progress line per finished run on stderr."""
    todo = queue.Queue()
    for c in cases:
        for variant in ("faulty", "fixed"):
            for t in names:
                todo.put((c, variant, t))
    total, results, failures, lock = todo.qsize(), [], [], threading.Lock()

    def worker():
        while not tools.STOP.is_set():
            try:
                c, variant, t = todo.get_nowait()
            except queue.Empty:
                return
            keep = os.path.join(a.keep, c.name, variant, t) if a.keep else None
            try:
                got = tools.run(t, c.file(variant), world=c.world, limit=a.limit, gpu=a.gpu, keep=keep)
                r = _record(c, variant, t, got)
            except Exception as e:  # noqa: BLE001  the scoreboard's own fault: stop everything and say which run
                failures.append(f"{c.name} {variant} {t}: {type(e).__name__}: {e}")
                tools.STOP.set()
                return
            if tools.STOP.is_set():
                return
            with lock:
                results.append(r)
                print(f"[{len(results)}/{total}] {c.name} {variant} {t}: {r['verdict']}"
                      f"{' ' + ','.join(r['names']) if r['names'] else ''} {r['seconds']:.1f} s ({r['outcome']})",
                      file=sys.stderr, flush=True)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(a.jobs, total))]
    for th in threads:
        th.start()
    try:
        for th in threads:
            while th.is_alive():
                th.join(timeout=0.5)  # short waits: Ctrl-C reaches this thread between them
    except KeyboardInterrupt:
        tools.STOP.set()  # each run in flight ends its processes (SIGTERM, then SIGKILL) and returns
        deadline = time.monotonic() + tools.GRACE_S + 15
        for th in threads:
            th.join(timeout=max(0.0, deadline - time.monotonic()))
        raise
    if failures:
        raise RuntimeError(failures[0])
    order = {(c.name, v, t): i for i, (c, v, t) in enumerate((c, v, t) for c in cases
                                                              for v in ("faulty", "fixed") for t in names)}
    return sorted(results, key=lambda r: order[(r["case"], r["variant"], r["tool"])])


def document(cases, names, runs, a, argv, gpus: int, gpu: str) -> dict:
    cpus = os.cpu_count()
    return {"made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join(["python benchmarks/scoreboard.py"] + [shlex.quote(x) for x in argv]),
            "torch": importlib.metadata.version("torch"), "python": platform.python_version(),
            "machine": f"{cpus} CPU cores, " + (f"{gpus} x {gpu}" if a.gpu else "no GPU"),
            "backend": "nccl" if a.gpu else "gloo", "limit_s": a.limit,
            "tools": {t: tools.DESCRIBE[t] for t in names},
            "corpus": {c.name: c.to_json() for c in cases}, "runs": runs,
            "scores": score.scores(runs, names),
            "per_class": score.per_class(runs, names, {c.name: c.cls for c in cases})}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    got = {}

    def stop(signum, frame):  # SIGTERM as Ctrl-C: every run in flight is ended, then one line
        got["signal"] = signum
        tools.STOP.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        p = parser()
        a = p.parse_args(argv)
        cases, names, gpus, gpu = choose(a, p)
        runs = run_all(cases, names, a)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; every run in flight was ended", file=sys.stderr)
        return 128 + got.get("signal", signal.SIGINT)
    except RuntimeError as e:
        print(f"{PROG}: a run could not be made, so nothing was scored: {e}", file=sys.stderr)
        return 1
    doc = document(cases, names, runs, a, argv, gpus, gpu)
    if a.write:
        with open(a.write, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    print(json.dumps(doc, indent=1) if a.json else table.render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
