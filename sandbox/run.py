"""Run your own script as N ranks, torchrun-style, and get a diagnosis when it hangs or fails.

    python -m sandbox.run -n 4 train.py --lr 0.1
    python -m sandbox.run -n 4 --json -m mypkg.train
    python -m sandbox.run -n 2 --hang-after 2 --timeout 60 --timeline hang.png --stacks train.py
    python -m sandbox.run -n 2 -v --debug DETAIL train.py   # -v: what the sandbox itself does, timed, on stderr
    python -m sandbox.run -n 4 --explore 16 train.py        # 16 schedules a cluster could give it (sandbox.explore)
    python -m sandbox.run -n 4 --replay 7 train.py          # the one of seed 7 again
    python -m sandbox.run --nnodes 2 --nproc-per-node 2 train.py  # two simulated nodes (as root), two ranks each
    python -m sandbox.run --nnodes 2 --nproc-per-node 2 --link-down 1@3s+5s --timeline t.png train.py
    python -m sandbox.run --launcher torchrun --nnodes 2 --nproc-per-node 2 --max-restarts 1 --kill-node 1@rank2:10 \
        train.py                                                  # torchrun's own agents; node1 dies, restarts

Every rank gets the environment torchrun gives (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, GROUP_RANK, TORCHELASTIC_*), so a script that runs under torchrun runs here unchanged;
with --nnodes, each node's ranks run inside their own network namespace (node0, node1, ...) with torchrun's
multi-node environment (MASTER_ADDR=node0, LOCAL_RANK counted per node, GROUP_RANK/NODE_RANK the node);
--launcher torchrun runs PyTorch's own elastic agent on each node instead (sandbox.agents), and faults (--kill-node,
--link-down, --cap) are injected from outside the nodes under either launcher (sandbox.faults).
A script (or -m module) that does not compile is reported once, as Python reports it, before any rank starts.
Exit code: 0 when every rank succeeded, 1 when the run failed, hung or timed out (or the script does not compile,
or with --strict it broke a contract: the report's last line says so), 2 on a usage error, 130/143 when
interrupted (Ctrl-C at any moment: one line, never a traceback).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import traceback

from sandbox import cli, defaults

PROG = "python -m sandbox.run"


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = cli.Parser(prog=prog, description="Run a script as N ranks on this machine and diagnose hangs and failures.")
    cli.add_world(p)
    p.add_argument("--launcher", choices=["sandbox", "torchrun"], default="sandbox",
                   help="sandbox: the sandbox starts the ranks (fast; default); torchrun: PyTorch's own elastic agent "
                        "on every simulated node (needs --nnodes 2 or more): its rendezvous, its restarts")
    p.add_argument("--max-restarts", type=cli.non_negative_int, default=0, metavar="N",
                   help="with --launcher torchrun: how often torchrun may restart the workers (default 0)")
    p.add_argument("--kill-node", action="append", default=[], metavar="NODE@WHEN",
                   help="kill every process on a node at a time (1@3s) or when a rank enters its k-th call "
                        "(1@rank2:5); under --launcher torchrun the node then comes back with a fresh agent")
    p.add_argument("--link-down", action="append", default=[], metavar="NODE@WHEN+FOR",
                   help="take a node's link down for a while (1@3s+5s: at 3 s, for 5 s)")
    p.add_argument("--cap", metavar="RATE", help="cap every node's link to RATE both ways (100mbit, 1gbit)")
    p.add_argument("--hang-after", type=cli.positive_seconds, default=defaults.HANG_AFTER_S, metavar="S",
                   help="call it a hang when every live rank has been stuck this long in calls nobody can complete "
                        f"(default {defaults.HANG_AFTER_S:g})")
    p.add_argument("--timeout", type=cli.positive_seconds, default=defaults.RUN_TIMEOUT_S, metavar="S",
                   help=f"stop the run after this many seconds (default {defaults.RUN_TIMEOUT_S:g})")
    p.add_argument("--json", action="store_true", help="print the result as JSON (the contract in the README)")
    p.add_argument("--trace-dir", metavar="DIR", help="keep each rank's trace, log and stack in DIR")
    p.add_argument("--timeline", type=cli.picture_path, metavar="FILE",
                   help="save a picture of every rank's calls over time (.png, .svg, .pdf)")
    p.add_argument("--stacks", action="store_true",
                   help="after the report, print the Python stack of every rank the sandbox ended (hung or stopped)")
    p.add_argument("--gpu", action="store_true", help="one GPU per rank (NCCL); needs as many GPUs as ranks")
    p.add_argument("--explore", type=cli.positive_int, metavar="K",
                   help="run it K more times, each under another schedule a cluster could give it (ranks started "
                        "late, one held before one of its calls, a slow rank; sandbox.explore), and report what "
                        "failed with the seed that replays it; stops at the first failure unless --explore-all")
    p.add_argument("--explore-all", action="store_true", help="with --explore: run all K schedules, and list every "
                                                               "distinct outcome")
    p.add_argument("--replay", type=cli.positive_int, metavar="SEED",
                   help="run it under the schedule of SEED, as --explore reported it")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when the run broke a contract, even if it finished (for CI: the report's last "
                        "line says so)")
    cli.add_common(p)
    p.add_argument("--live", choices=["auto", "on", "off"], default="auto",
                   help="print rank output as it comes (auto: when stderr is a terminal)")
    p.add_argument("-m", dest="module", metavar="MODULE", help="run a module, like python -m")
    p.add_argument("script", nargs="?", help="the script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return p


def _preload_report() -> None:
    """Import rich while the ranks run, so the report costs nothing after them."""
    try:
        import sandbox.report  # noqa: F401
        import rich.console  # noqa: F401
        import rich.table  # noqa: F401
    except Exception:  # noqa: BLE001  only a head start: the report imports them itself, and says what failed
        pass


def syntax_error(path: str, shown: str | None = None) -> str | None:
    """Python's own report of the syntax error in the script at `path` (its file, line, the line and a caret),
    or None when it compiles or cannot be read (the run then says what is wrong with it). Checked here, before any
    rank starts: N ranks would each print the same error, wrapped in the sandbox's frames."""
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError:  # no such script, a folder: the launcher's own check answers that in one sentence
        return None
    try:
        compile(source, shown or path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:  # ValueError: null bytes, on Pythons older than 3.12
        return "".join(traceback.format_exception_only(type(e), e))
    return None


def module_file(name: str) -> str | None:
    """The file `python -m name` would run (name.py, or a package's __main__.py), found where the ranks look (the
    working directory first, then sys.path) without importing anything; None when it is not a plain file there."""
    parts = name.split(".")
    for base in [os.getcwd(), *sys.path]:
        stem = os.path.join(base or os.curdir, *parts)
        for path in (stem + ".py", os.path.join(stem, "__main__.py")):
            if os.path.isfile(path):
                return os.path.abspath(path)
    return None


def stacks(res) -> str:
    """The Python stack of every rank the sandbox ended (hung, or stopped because another failed), for --stacks."""
    parts = []
    for r in res.ranks:
        if r.outcome in ("hung", "stopped"):
            where = f" in {r.pending['call']}" if r.pending and r.pending.get("call") else ""
            body = (r.stack or "").rstrip() or "  (no stack: it ended before it could dump one)"
            parts.append(f"rank {r.rank} ({r.outcome}{where}), its Python stack:\n{body}")
    return "\n\n".join(parts)


def main(argv=None) -> int:
    p = parser()
    a = p.parse_args(argv)
    cli.setup_logging(a.verbose)
    if a.module is None and a.script is None:
        p.error("give a script to run (or -m MODULE)")
    try:
        world = cli.world(a)
    except ValueError as e:
        p.error(str(e))
    torchrun = a.launcher == "torchrun"
    if not torchrun and a.max_restarts:
        p.error("--max-restarts is torchrun's: it needs --launcher torchrun")
    if (torchrun or a.cap or a.kill_node or a.link_down) and a.nnodes < 2:
        p.error("--launcher torchrun, --cap and faults run on simulated nodes: give --nnodes 2 or more")
    if torchrun and a.gpu:
        p.error("--launcher torchrun runs CPU ranks on simulated nodes: leave out --gpu")
    if (a.explore or a.replay) and (torchrun or a.nnodes > 1 or a.kill_node or a.link_down):
        p.error("--explore and --replay run the sandbox's own ranks on one node: leave out --nnodes and faults")
    if a.explore and a.replay:
        p.error("--explore finds a schedule, --replay runs one: give one of them")
    if a.explore_all and not a.explore:
        p.error("--explore-all goes with --explore K")
    if (a.explore or a.replay) and a.trace_dir:
        p.error("--trace-dir keeps one run's traces: give it to a plain run, not to --explore or --replay")
    from sandbox import faults as faultlib

    try:
        faults = [faultlib.parse(kind, text) for kind, texts in (("kill", a.kill_node), ("link-down", a.link_down))
                  for text in texts]
    except ValueError as e:
        p.error(str(e).rstrip("."))
    if a.module is not None and a.script is not None:
        a.args = [a.script] + a.args
    source = a.script if a.module is None else module_file(a.module)
    if source is not None:
        bad = syntax_error(source)
        if bad is not None:
            sys.stderr.write(bad)
            return 1

    from sandbox.launcher import Interrupted, UsageError, run_script

    live = a.live == "on" or (a.live == "auto" and not a.json and sys.stderr.isatty())
    lock = threading.Lock()

    def echo(rank, line):
        with lock:
            sys.stderr.write(f"[rank {rank}] {line}\n")
            sys.stderr.flush()

    def on_term(signum, frame):  # outside the run itself (which handles SIGTERM like Ctrl-C): exit as killed
        raise SystemExit(defaults.interrupted_exit(signum))

    signal.signal(signal.SIGTERM, on_term)
    threading.Thread(target=_preload_report, daemon=True).start()
    strict_fail = False
    node_options = {"cap": a.cap} if a.cap else None
    if a.explore or a.replay:
        return _explore(a, world, echo if live else None)
    try:
        if torchrun:
            from sandbox import agents

            res = agents.run_script(a.module or a.script, a.args, module=a.module is not None, nnodes=a.nnodes,
                                    nproc_per_node=a.nproc_per_node or 1, max_restarts=a.max_restarts,
                                    hang_after=a.hang_after, timeout=a.timeout, trace_dir=a.trace_dir,
                                    node_options=node_options, faults=faults, debug=a.debug)
        else:
            res = run_script(a.module or a.script, a.args, world_size=world, nnodes=a.nnodes,
                             module=a.module is not None, hang_after=a.hang_after, timeout=a.timeout,
                             trace_dir=a.trace_dir, gpu=a.gpu, debug=a.debug, on_output=echo if live else None,
                             node_options=node_options, faults=faults)
        strict_fail = res.ok and a.strict and bool(res.warnings)
        code = 0 if res.ok and not strict_fail else 1
    except UsageError as e:
        cli.say(PROG, str(e))
        return 2
    except Interrupted as e:
        res = e.result
        code = defaults.interrupted_exit(e.signal)
    from sandbox import report

    if a.timeline:
        try:
            report.timeline(res, a.timeline)
        except Exception as e:  # noqa: BLE001  the run's verdict stands without its picture: say why it is missing
            cli.say(PROG, f"no timeline: {e}")
    if a.json:
        print(json.dumps(res.to_dict()))
        return code
    report.print_result(res, logs=not live, strict=a.strict)
    if a.stacks and stacks(res):
        print()
        print(stacks(res))
    if a.timeline and os.path.exists(a.timeline):
        print(f"timeline: {a.timeline}")
    if strict_fail:  # the headline says FAILED (strict: ...); the last line says why the exit code is 1
        n = len(res.warnings)
        print()
        print(f"--strict: {n} contract warning{'s' if n != 1 else ''}, exit code 1")
    return code


def _explore(a, world: int, on_output) -> int:
    """--explore K and --replay SEED: every run forked by one warm zygote, with the options of a plain run."""
    from sandbox import explore, report, schedules
    from sandbox.launcher import Interrupted, UsageError, run_script

    def told(env: dict):  # several schedules run at once: each line a rank prints says which schedule's run it is
        seed = schedules.seed_of(env)
        if on_output is None or seed is None:
            return on_output
        return lambda rank, line: on_output(rank, f"(schedule {seed}) {line}")

    start = explore.started(lambda env: run_script(a.module or a.script, a.args, world_size=world,
                                                   module=a.module is not None, hang_after=a.hang_after,
                                                   timeout=a.timeout, gpu=a.gpu, debug=a.debug, env=env, warm=True,
                                                   on_output=told(env)))

    def again(seed: int) -> str:
        what = (["-m", a.module] if a.module else [a.script]) + list(a.args)
        return " ".join([PROG, "--replay", str(seed), "-n", str(world), *what])

    try:
        if a.replay:
            schedule, res = explore.replay(start, a.replay)
            said = f"schedule {a.replay}: {schedule.words()}"
        else:
            found = explore.explore(start, a.explore, every=a.explore_all, jobs=1 if a.gpu else explore.JOBS)
            said, res = found.summary(again), found.result
    except UsageError as e:
        cli.say(PROG, str(e))
        return 2
    except Interrupted as e:
        cli.say(PROG, "interrupted")
        return defaults.interrupted_exit(e.signal)
    if a.timeline:  # the run shown: the one that failed (or the replayed one, or the first)
        try:
            report.timeline(res, a.timeline)
        except Exception as e:  # noqa: BLE001  the verdict stands without its picture: say why it is missing
            cli.say(PROG, f"no timeline: {e}")
    if a.json:
        print(json.dumps({"schedules": said, "result": res.to_dict()}))
        return 0 if res.ok else 1
    print(said)
    if not res.ok or a.replay:
        print()
        report.print_result(res, logs=on_output is None)
    if a.timeline and os.path.exists(a.timeline):
        print(f"timeline: {a.timeline}")
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(cli.guarded(main, PROG))
