"""Diagnose a run afterwards, from the trace directory its ranks wrote:

    torchrun --nproc-per-node 4 -m sandbox.trace --trace-dir traces/ train.py
    python -m sandbox.diagnose traces/            # the same verdict the sandbox gives a live run
    python -m sandbox.diagnose traces/ --json

Exit code: 0 when every rank finished, 1 when the run failed or hung, 2 when the directory cannot be read.
"""
from __future__ import annotations

import json
import os
import sys

from sandbox import policy
from sandbox.events import TRACE_FILE, FormatError, load_dir
from sandbox.result import RankResult, RunResult


def load_result(trace_dir: str) -> RunResult:
    """The RunResult of a trace directory, judged offline (no exit codes: the launcher was torchrun or a crash)."""
    tracks = policy.fill_missing(load_dir(trace_dir))
    j = policy.judge(tracks)
    ranks = [RankResult.from_track(t, j.outcomes[r]) for r, t in sorted(tracks.items())]
    evs = sorted((e for t in tracks.values() for e in t.events), key=lambda e: e.get("t", 0))
    return RunResult(verdict=j.verdict, world_size=len(tracks), wall_s=None, diagnosis=j.diagnosis, ranks=ranks,
                     events=evs, warnings=j.warnings)


def main(argv=None) -> int:
    from sandbox import cli

    p = cli.Parser(prog="python -m sandbox.diagnose",
               description="Diagnose a run from the per-rank trace files written by sandbox.trace.")
    p.add_argument("trace_dir")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="log what the sandbox does")
    a = p.parse_args(argv)
    cli.setup_logging(a.verbose)
    if not os.path.isdir(a.trace_dir):
        print(f"sandbox.diagnose: {a.trace_dir} is not a directory.", file=sys.stderr)
        return 2
    if not any(TRACE_FILE.fullmatch(n) for n in os.listdir(a.trace_dir)):
        print(f"sandbox.diagnose: {a.trace_dir} holds no rank-<N>.jsonl trace files.", file=sys.stderr)
        return 2
    try:
        res = load_result(a.trace_dir)
    except FormatError as e:
        print(f"sandbox.diagnose: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(res.to_dict(), indent=2))
    else:
        from sandbox import report
        report.print_result(res)
    return 0 if res.verdict == "ok" else 1


if __name__ == "__main__":
    from sandbox import cli
    sys.exit(cli.guarded(main, "sandbox.diagnose"))
