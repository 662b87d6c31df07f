"""The bug catalogue at the terminal: reproduce a documented bug, see the sandbox's diagnosis, then its fix.

    python -m sandbox.repro --list
    python -m sandbox.repro kv-sync                      # broken, then fixed, then the explanation
    python -m sandbox.repro group-order --variant broken -n 4 --timeline group-order.png
    python -m sandbox.repro cross-device --gpu           # the real CUDA error on 2+ GPUs (NCCL, one GPU per rank)
    python -m sandbox.repro --all --gpu                  # every bug with a GPU form, on as many GPUs as it can use
    python -m sandbox.repro init-port --debug DETAIL     # PyTorch's own report beside the sandbox's

Exit code: 0 when every variant run behaved as documented, 1 when one did not, 2 on a usage error or a bug that
cannot run here (one on simulated nodes without root: `--all` skips those, says why, and judges the rest), 128 + the
signal when interrupted (130 after Ctrl-C). Listing, --help and usage errors answer at once: the catalogue is read
without importing torch.

Without --gpu a run is a CPU run on any machine (its ranks see no GPU). With --gpu each rank owns one GPU and the
bug runs on NCCL, with the expectation its module documents for NCCL; the default number of ranks is then the
bug's own, capped at the GPUs visible.
"""
from __future__ import annotations

import json
import os
import sys

from sandbox import cli, defaults
from sandbox.bugs import registry, run_variant, unavailable


def draw_timeline(res, path: str) -> None:
    """--timeline's picture of a run (a picture that cannot be drawn is said on stderr, not raised)."""
    from sandbox import report

    try:
        report.timeline(res, path)
    except Exception as e:  # noqa: BLE001  a picture that cannot be drawn is not the run's failure
        print(f"sandbox.repro: no timeline: {e}", file=sys.stderr)


def _list(bugs) -> None:
    from rich.console import Console
    from rich.table import Table

    out = sys.stdout
    console = Console(file=out, width=None if out.isatty() else 140, highlight=False)
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("slug", "title", "symptom", "needs", "ranks", "--gpu"):
        t.add_column(col, overflow="fold")
    for b in bugs.values():
        t.add_row(b.slug, b.title, b.symptom, b.needs, f"{b.world_size} (min {b.min_world_size})"
                  + (f" on {b.nnodes} nodes" if b.nnodes > 1 else ""),
                  f"yes (min {b.gpu.min_world_size})" if b.gpu else "no")
    console.print(t)


def parser(prog: str = "python -m sandbox.repro") -> cli.Parser:
    p = cli.Parser(prog=prog, description="Reproduce a documented distributed bug and its fix.")
    p.add_argument("bug", nargs="?", help="the bug's slug (see --list)")
    p.add_argument("--list", action="store_true", help="list the catalogue")
    p.add_argument("--all", action="store_true", help="run every bug, both variants, and print one line each")
    p.add_argument("--variant", choices=["broken", "fixed", "both"], default="both")
    p.add_argument("-n", dest="n", type=cli.positive_int, help="number of ranks (default: the bug's own)")
    p.add_argument("--gpu", action="store_true", help="one GPU per rank (NCCL), where the bug supports it")
    p.add_argument("--json", action="store_true", help="print the runs as JSON")
    p.add_argument("--timeline", metavar="FILE", type=cli.picture_path,
                   help="save a timeline picture, .png, .svg or .pdf (FILE-broken.png / FILE-fixed.png)")
    cli.add_common(p)
    return p


def main(argv=None) -> int:
    p = parser()
    a = p.parse_args(argv)
    cli.setup_logging(a.verbose)

    bugs = registry()
    if a.list:
        if a.json:
            print(json.dumps([{"slug": b.slug, "title": b.title, "symptom": b.symptom, "needs": b.needs,
                               "source": b.source, "world_size": b.world_size, "min_world_size": b.min_world_size,
                               "nnodes": b.nnodes,
                               "broken": b.broken.describe(), "fixed": b.fixed.describe(),
                               "gpu": None if b.gpu is None else {
                                   "broken": b.gpu.broken.describe(), "fixed": b.gpu.fixed.describe(),
                                   "min_world_size": b.gpu.min_world_size, "on_gpus": b.on_gpus}}
                              for b in bugs.values()]))
        else:
            _list(bugs)
        return 0
    from sandbox.launcher import Interrupted, UsageError

    try:
        return _run_all(bugs, a) if a.all else _run_one(p, bugs, a)
    except UsageError as e:
        print(f"sandbox.repro: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:
        print("sandbox.repro: interrupted.", file=sys.stderr)
        return defaults.interrupted_exit(e.signal)


def visible_gpus() -> int:
    """GPUs this process can see, counted through NVML (CUDA is not initialised here)."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    return torch.cuda.device_count()


def ranks_for(bug, n: int | None, gpus: int | None) -> int:
    """The number of ranks to run: -n, else the bug's own, capped under --gpu (gpus given) at the GPUs visible."""
    if n:
        return n
    return bug.world_size if gpus is None else max(min(bug.world_size, gpus), bug.gpu.min_world_size)


def _with_gpu(bugs) -> str:
    return ", ".join(s for s, b in bugs.items() if b.gpu) or "none"


def _run_one(p, bugs, a) -> int:
    if not a.bug:
        p.error("name a bug (see --list)")
    if a.bug not in bugs:
        print(f"sandbox.repro: unknown bug {a.bug!r}; known: {', '.join(bugs)}.", file=sys.stderr)
        return 2
    bug = bugs[a.bug]
    if a.gpu and bug.gpu is None:
        p.error(f"{bug.slug} has no GPU form (the bugs with one: {_with_gpu(bugs)})")
    n = ranks_for(bug, a.n, visible_gpus() if a.gpu else None)
    least = bug.gpu.min_world_size if a.gpu else bug.min_world_size
    if n < least:
        p.error(f"{bug.slug} needs at least {least} ranks{' (one GPU each)' if a.gpu else ''}")
    why = unavailable(bug)
    if why:  # it cannot run here: say what it needs, and claim nothing about its behaviour
        print(f"sandbox.repro: {bug.slug} runs on {bug.nnodes} simulated nodes: {why}", file=sys.stderr)
        return 2
    runs = []
    for v in _variants(a):
        timeline = _timeline_name(a.timeline, v, a.variant)
        run = run_variant(bug, v, n, gpu=a.gpu, debug=a.debug)
        if timeline:
            draw_timeline(run.result, timeline)
        runs.append((v, run))
        if not a.json:
            _print_run(bug, v, run, timeline, gpu=a.gpu)
    all_ok = all(run.as_documented for _, run in runs)
    if a.json:
        print(json.dumps(runs_json(bug, runs, a.gpu)))
    else:
        print()
        print(f"Why ({bug.source}):")
        print(bug.explanation)
    return 0 if all_ok else 1


def runs_json(bug, runs: list, gpu: bool = False) -> dict:
    """What `--json` prints for one bug's runs, [(variant, VariantRun)] (the docs build's bug pages read it too)."""
    return {"bug": bug.slug, "title": bug.title, "as_documented": all(run.as_documented for _, run in runs),
            "explanation": bug.explanation, "gpu": gpu,
            "variants": [{"variant": v, "as_documented": run.as_documented,
                          "expected": bug.expect(v, gpu).describe(), "why_not": run.why_not,
                          "result": run.result.to_dict()} for v, run in runs]}


def _variants(a) -> list[str]:
    return ["broken", "fixed"] if a.variant == "both" else [a.variant]


def _timeline_name(path: str | None, variant: str, chosen: str) -> str | None:
    """--timeline's file for one variant: the name given, or with both variants NAME-broken.png, NAME-fixed.png."""
    if not path or chosen != "both":
        return path
    root, ext = os.path.splitext(path)
    return f"{root}-{variant}{ext}"


def _run_all(bugs, a) -> int:
    """The whole catalogue, one line a variant; exit 0 only if every variant run behaved as documented."""
    import time

    gpus = visible_gpus() if a.gpu else None
    if gpus is not None and gpus < 2:
        from sandbox.launcher import UsageError
        raise UsageError(f"--all --gpu needs at least 2 GPUs (one per rank); {gpus} visible.")
    t0, rows = time.monotonic(), []
    for bug in bugs.values():
        if (bug.needs == "gpu" and not a.gpu) or (a.gpu and bug.gpu is None):
            continue
        least = bug.gpu.min_world_size if a.gpu else bug.min_world_size
        n = max(ranks_for(bug, a.n, gpus), least)
        if gpus is not None and n > gpus:
            rows.append({"bug": bug.slug, "variant": "both", "as_documented": None, "skipped":
                         f"needs {n} GPUs, {gpus} visible", "for_want_of": "GPUs"})
            if not a.json:
                print(f"{bug.slug:22} skipped: needs {n} GPUs (one per rank), {gpus} visible", flush=True)
            continue
        lacking = unavailable(bug)
        if lacking:  # simulated nodes need root: say so, once a bug, and judge the rest
            rows.append({"bug": bug.slug, "variant": "both", "as_documented": None, "skipped": lacking,
                         "for_want_of": "simulated nodes"})
            if not a.json:
                print(f"{bug.slug:22} skipped: {lacking}", flush=True)
            continue
        for v in _variants(a):
            res, ok, why = run_variant(bug, v, n, gpu=a.gpu, debug=a.debug)
            warned = sorted({w.kind for w in res.warnings})
            rows.append({"bug": bug.slug, "variant": v, "as_documented": ok, "why_not": why, "verdict": res.verdict,
                         "kind": res.diagnosis.kind, "wall_s": res.wall_s, "warnings": warned})
            if not a.json:
                mark = "as documented" if ok else "NOT as documented: " + "; ".join(why)
                if warned:  # a broken variant that finished names the contract it broke (kv-sync on NCCL)
                    mark += f", {'warnings' if len(warned) > 1 else 'warning'} {', '.join(warned)}"
                print(f"{bug.slug:22} {v:7} {res.headline():47} {mark}", flush=True)
    total = time.monotonic() - t0
    ran = [r for r in rows if r["as_documented"] is not None]
    # decided from every row at the end, not accumulated run by run: one variant not as documented, wherever it
    # came in the catalogue, fails the whole run
    all_ok = all(r["as_documented"] for r in ran)
    if a.json:
        print(json.dumps({"as_documented": all_ok, "total_s": round(total, 2), "runs": rows}))
    else:
        skipped: dict[str, int] = {}  # bugs skipped, by what they lacked: GPUs, simulated nodes
        for r in rows:
            if r["as_documented"] is None:
                skipped[r["for_want_of"]] = skipped.get(r["for_want_of"], 0) + 1
        print(f"{sum(r['as_documented'] for r in ran)}/{len(ran)} variants as documented"
              f"{' on GPUs (NCCL)' if a.gpu else ''} in {total:.1f} s"
              + "".join(f"; {k} bug{'s' if k > 1 else ''} skipped for want of {why}" for why, k in skipped.items()))
    return 0 if all_ok else 1


def _print_run(bug, variant, run, timeline, gpu=False) -> None:
    from rich.console import Console
    from rich.rule import Rule

    from sandbox import report

    out = sys.stdout
    console = Console(file=out, width=None if out.isatty() else 120, highlight=False)
    console.print(Rule(f"{bug.slug}: {variant}", align="left"))
    report.print_result(run.result, logs=True, max_log_lines=6)
    mark = "[green]as documented[/]" if run.as_documented else "[red]NOT as documented[/]: " + "; ".join(run.why_not)
    expect = bug.expect(variant, gpu)
    if getattr(expect, "differs_from_reference", False) and run.result.verdict == "ok":
        _print_first_difference(console, run.result)
    console.print(f"expected: {expect.describe()} -> {mark}")
    if timeline:
        console.print(f"timeline: {timeline}")
    console.print()


def _print_first_difference(console, res) -> None:
    """A variant whose symptom is a wrong answer finishes "OK": say where it first departs from the reference."""
    from sandbox.bugs.reference import differences, reference_of

    ref = reference_of(res)
    found = differences(res, ref) if ref is not None else []
    if found:
        more = f" (and {len(found) - 1} more rank{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
        console.print(f"wrong answer: rank {found[0].rank} {found[0].sentence()}{more}")


if __name__ == "__main__":
    sys.exit(cli.guarded(main, "sandbox.repro"))
