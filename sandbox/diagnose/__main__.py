"""Diagnose a run afterwards, from the trace directory its ranks wrote, or from a directory of PyTorch Flight
Recorder dumps written by any job (no sandbox in it):

    torchrun --nproc-per-node 4 -m sandbox.trace --trace-dir traces/ train.py
    python -m sandbox.diagnose traces/            # the same verdict the sandbox gives a live run
    python -m sandbox.diagnose traces/ --json
    python -m sandbox.diagnose dumps/             # nccl_trace_rank_<N> files (TORCH_FR_DUMP_TEMP_FILE)
    python -m sandbox.diagnose dumps/ --prefix rank_

A rank whose dump is missing, empty or torn (it died while writing it) is named, and the diagnosis is made from the
dumps there are. Exit code: 0 when every rank finished, 1 when the run failed or hung, 2 when the directory cannot be
read (no trace file, and not one dump that can be read).
"""
from __future__ import annotations

import json
import os
import sys

from sandbox import flight, flight_offline, flight_view, policy, rundir, words
from sandbox.events import TRACE_FILE, FormatError, load_dir
from sandbox.result import Diagnosis, Kind, RankResult, RunResult


def load_result(trace_dir: str, prefix: str = flight.PREFIX) -> RunResult:
    """The RunResult of a trace directory (with the ranks' Flight Recorder dumps merged in, where they left them), or
    of a directory of Flight Recorder dumps alone, judged offline (no exit codes: the launcher was torchrun or a
    crash)."""
    if any(TRACE_FILE.fullmatch(n) for n in os.listdir(trace_dir)):
        tracks = policy.fill_missing(load_dir(trace_dir))
        dumps = flight.read_run(trace_dir)
        tracks = flight_view.merge(tracks, dumps) if dumps else tracks
        stopped_for = rundir.read_ended(trace_dir, tracks)  # a sandbox launcher's facts of each rank's end
        absent, unreadable = [], {}
    else:
        found = flight.find(trace_dir, prefix)
        dumps, unreadable = flight.load_each(found)
        if not dumps:  # not one rank's dump: the wrong directory, or a job that wrote none whole
            if len(found) == 1:
                flight.load(next(iter(found.values())))  # raises: its own sentence, with its whole path
            raise flight.FlightError(f"none of the {len(found)} files named {prefix}<N> in {trace_dir} can be read"
                                     f" as a Flight Recorder dump ({'; '.join(list(unreadable.values())[:3])}"
                                     f"{'; ...' if len(unreadable) > 3 else ''}).")
        tracks = flight_offline.tracks_from_dumps(dumps, unreadable)
        absent = sorted(set(tracks) - set(dumps) - set(unreadable))
        stopped_for = None
    j = policy.judge(tracks, stopped_for)
    if dumps and not any(TRACE_FILE.fullmatch(n) for n in os.listdir(trace_dir)) and j.verdict == "ok":
        differ = [w for w in j.warnings if w.kind == "collective_differs"]
        if differ:  # the dumps say no more than that the calls completed: their data is wrong
            w = differ[0]
            j.verdict = "error"
            j.diagnosis = Diagnosis(kind=Kind.COLLECTIVE_MISMATCH, cause=f"{w.summary} The ranks that completed it hold"
                                    " wrong data.", culprit_ranks=w.details.get("odd_ranks") or w.ranks, op=w.op,
                                    group=w.group, seq=w.seq,
                                    site=w.sites.get((w.details.get("odd_ranks") or w.ranks)[0]),
                                    details={"differs_in": w.details.get("differs_in")})
        else:
            j.diagnosis = Diagnosis(kind=Kind.NONE, cause=f"Every collective in the {len(dumps)} dumps completed, and"
                                    " every rank reached the same calls (a dump does not say whether its rank then"
                                    " finished).")
    if absent and "without a Flight Recorder dump" not in j.diagnosis.summary:  # unless the cause said so already
        j.diagnosis = j.diagnosis.noted(f"{words.ranks(absent).capitalize()} left no dump (finished, or died before"
                                        " writing one); this diagnosis is made from the dumps there are.")
    if unreadable:  # whatever the cause said: which file, and what is wrong with it
        whose = (f"{words.ranks(unreadable).capitalize()}'s dump cannot be read" if len(unreadable) == 1 else
                 f"The dumps of {words.ranks(unreadable)} cannot be read")
        j.diagnosis = j.diagnosis.noted(f"{whose}: {'; '.join(unreadable.values())}. A rank that dies while writing"
                                        " its dump leaves it empty or torn; this diagnosis is made from the dumps"
                                        " there are.")
    ranks = [RankResult.from_track(t, j.outcomes[r]) for r, t in sorted(tracks.items())]
    evs = sorted((e for t in tracks.values() for e in t.events), key=lambda e: e.get("t", 0))
    return RunResult(verdict=j.verdict, world_size=len(tracks), wall_s=None, diagnosis=j.diagnosis, ranks=ranks,
                     events=evs, warnings=j.warnings)


def main(argv=None) -> int:
    from sandbox import cli

    p = cli.Parser(prog="python -m sandbox.diagnose",
               description="Diagnose a run from the per-rank trace files written by sandbox.trace.")
    p.add_argument("trace_dir", help="a sandbox trace directory, or a directory of Flight Recorder dumps")
    p.add_argument("--prefix", default=flight.PREFIX,
                   help=f"the file prefix of Flight Recorder dumps (default {flight.PREFIX}, torch's)")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="log what the sandbox does")
    a = p.parse_args(argv)
    cli.setup_logging(a.verbose)
    if not os.path.isdir(a.trace_dir):
        print(f"sandbox.diagnose: {a.trace_dir} is not a directory.", file=sys.stderr)
        return 2
    names = os.listdir(a.trace_dir)
    if not any(TRACE_FILE.fullmatch(n) for n in names) and not flight.find(a.trace_dir, a.prefix):
        print(f"sandbox.diagnose: {a.trace_dir} holds no rank-<N>.jsonl trace files and no Flight Recorder dumps"
              f" named {a.prefix}<N> (another prefix: --prefix).", file=sys.stderr)
        return 2
    try:
        res = load_result(a.trace_dir, a.prefix)
    except (FormatError, flight.FlightError) as e:
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
