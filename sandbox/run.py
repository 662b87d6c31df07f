"""Run your own script as N ranks, torchrun-style, and get a diagnosis when it hangs or fails.

    python -m sandbox.run -n 4 train.py --lr 0.1
    python -m sandbox.run -n 4 --json -m mypkg.train
    python -m sandbox.run -n 2 --hang-after 2 --timeout 60 --timeline hang.png train.py
    python -m sandbox.run -n 2 -v --debug DETAIL train.py   # -v: what the sandbox itself does, on stderr

Every rank gets the environment torchrun gives (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, GROUP_RANK, TORCHELASTIC_*), so a script that runs under torchrun runs here unchanged.
Exit code: 0 when every rank succeeded, 1 when the run failed, hung or timed out, 2 on a usage error,
130/143 when interrupted (Ctrl-C at any moment: one line, never a traceback).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from sandbox import cli


def parser(prog: str = "python -m sandbox.run") -> argparse.ArgumentParser:
    p = cli.Parser(prog=prog, description="Run a script as N ranks on this machine and diagnose hangs and failures.")
    p.add_argument("-n", "--nproc", dest="n", type=cli.positive_int, default=2, metavar="N",
                   help="number of ranks (default 2)")
    p.add_argument("--hang-after", type=cli.positive_seconds, default=1.0, metavar="S",
                   help="call it a hang when every live rank has been stuck this long in calls nobody can complete (default 1)")
    p.add_argument("--timeout", type=cli.positive_seconds, default=300.0, metavar="S",
                   help="stop the run after this many seconds (default 300)")
    p.add_argument("--json", action="store_true", help="print the result as JSON (the contract in the README)")
    p.add_argument("--trace-dir", metavar="DIR", help="keep each rank's trace, log and stack in DIR")
    p.add_argument("--timeline", metavar="FILE", help="save a picture of every rank's calls over time (.png, .svg)")
    p.add_argument("--gpu", action="store_true", help="one GPU per rank (NCCL); needs as many GPUs as ranks")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when the run broke a contract, even if it finished (for CI: see the warnings)")
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
    except Exception:  # noqa: BLE001
        pass


def main(argv=None) -> int:
    p = parser()
    a = p.parse_args(argv)
    cli.setup_logging(a.verbose)
    if a.module is None and a.script is None:
        p.error("give a script to run (or -m MODULE)")
    if a.module is not None and a.script is not None:
        a.args = [a.script] + a.args
    if a.timeline and os.path.splitext(a.timeline)[1].lower() not in (".png", ".svg", ".pdf"):
        p.error(f"--timeline wants a .png, .svg or .pdf file name, not {a.timeline}")

    from sandbox.launcher import Interrupted, UsageError, run_script

    live = a.live == "on" or (a.live == "auto" and not a.json and sys.stderr.isatty())
    lock = threading.Lock()

    def echo(rank, line):
        with lock:
            sys.stderr.write(f"[rank {rank}] {line}\n")
            sys.stderr.flush()

    def on_term(signum, frame):  # outside the run itself (which handles SIGTERM like Ctrl-C): exit as killed
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    threading.Thread(target=_preload_report, daemon=True).start()
    try:
        res = run_script(a.module or a.script, a.args, world_size=a.n, module=a.module is not None,
                         hang_after=a.hang_after, timeout=a.timeout, trace_dir=a.trace_dir, gpu=a.gpu,
                         debug=a.debug, on_output=echo if live else None)
        code = 0 if res.ok and not (a.strict and res.warnings) else 1
    except UsageError as e:
        print(f"sandbox.run: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:
        res = e.result
        code = 128 + e.signal
    from sandbox import report

    if a.timeline:
        try:
            report.timeline(res, a.timeline)
        except Exception as e:  # noqa: BLE001
            print(f"sandbox.run: no timeline: {e}", file=sys.stderr)
    if a.json:
        print(json.dumps(res.to_dict()))
    else:
        report.print_result(res, logs=not live)
        if a.timeline and os.path.exists(a.timeline):
            print(f"timeline: {a.timeline}")
    return code


if __name__ == "__main__":
    sys.exit(cli.guarded(main, "sandbox.run"))
