"""The bug catalogue at the terminal: reproduce a documented bug, see the sandbox's diagnosis, then its fix.

    python -m sandbox.repro --list
    python -m sandbox.repro kv-sync                      # broken, then fixed, then the explanation
    python -m sandbox.repro group-order --variant broken -n 4 --timeline group-order.png
    python -m sandbox.repro cross-device --gpu           # the real CUDA error on 2+ GPUs
    python -m sandbox.repro init-port --debug DETAIL     # PyTorch's own report beside the sandbox's

Exit code: 0 when every variant run behaved as documented, 1 when one did not, 2 on a usage error, 130 when
interrupted. Listing, --help and usage errors answer at once: the catalogue is read without importing torch.
"""
from __future__ import annotations

import json
import os
import re
import sys

from sandbox import cli


def explanation(doc: str) -> str:
    """The Symptom / Root cause / Fix / Simulated paragraphs of a bug module's docstring (not its Run output)."""
    keep, out = False, []
    for line in doc.strip().splitlines():
        head = re.match(r"^(Symptom|Root cause|Fix|Simulated[^:]*|Source):", line)
        if head:
            keep = head.group(1) != "Source"
        elif re.match(r"^Run:", line):
            keep = False
        if keep:
            out.append(line)
    return "\n".join(out).strip()


def run_variant(bug, variant: str, n: int, gpu: bool = False, debug: str | None = None, timeline: str | None = None,
                **launch_options):
    """Run one variant of a bug; returns (RunResult, as_documented, reasons)."""
    import importlib

    from sandbox.bugs import check
    from sandbox.launch import launch
    from sandbox.bugs._entry import run as entry

    mod = importlib.import_module(bug.module)
    kwargs = mod.options(n, gpu) if hasattr(mod, "options") else {}
    res = launch(entry, world_size=n, args=(bug.module, variant, kwargs), gpu=gpu, debug=debug,
                 timeout=bug.timeout, preload=[bug.module], **launch_options)
    expect = getattr(bug, variant)
    ok, why = check(bug, expect, res, debug=bool(debug))
    if timeline:
        from sandbox import report
        try:
            report.timeline(res, timeline)
        except Exception as e:  # noqa: BLE001  a picture that cannot be drawn is not the run's failure
            print(f"sandbox.repro: no timeline: {e}", file=sys.stderr)
    return res, ok, why


def _list(bugs) -> None:
    from rich.console import Console
    from rich.table import Table

    out = sys.stdout
    console = Console(file=out, width=None if out.isatty() else 140, highlight=False)
    t = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("slug", "title", "symptom", "needs", "ranks"):
        t.add_column(col, overflow="fold")
    for b in bugs.values():
        t.add_row(b.slug, b.title, b.symptom, b.needs, f"{b.world_size} (min {b.min_world_size})")
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
    p.add_argument("--timeline", metavar="FILE", help="save a timeline picture (FILE-broken.png / FILE-fixed.png)")
    cli.add_common(p)
    return p


def main(argv=None) -> int:
    p = parser()
    a = p.parse_args(argv)
    cli.setup_logging(a.verbose)

    from sandbox.bugs import registry

    bugs = registry()
    if a.list:
        if a.json:
            print(json.dumps([{"slug": b.slug, "title": b.title, "symptom": b.symptom, "needs": b.needs,
                               "source": b.source, "world_size": b.world_size, "min_world_size": b.min_world_size,
                               "broken": b.broken.describe(), "fixed": b.fixed.describe()} for b in bugs.values()]))
        else:
            _list(bugs)
        return 0
    if a.timeline and os.path.splitext(a.timeline)[1].lower() not in (".png", ".svg", ".pdf", ""):
        p.error(f"--timeline wants a .png, .svg or .pdf file name, not {a.timeline}")
    from sandbox.launch import Interrupted, UsageError

    try:
        return _run_all(bugs, a) if a.all else _run_one(p, bugs, a)
    except UsageError as e:
        print(f"sandbox.repro: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:
        print("sandbox.repro: interrupted.", file=sys.stderr)
        return 128 + e.signal


def _debug(a) -> str | None:
    """TORCH_DISTRIBUTED_DEBUG for the ranks: None leaves it unset (OFF is PyTorch's default)."""
    return a.debug if a.debug and a.debug != "OFF" else None


def _run_one(p, bugs, a) -> int:
    if not a.bug:
        p.error("name a bug (see --list)")
    if a.bug not in bugs:
        print(f"sandbox.repro: unknown bug {a.bug!r}; known: {', '.join(bugs)}.", file=sys.stderr)
        return 2
    bug = bugs[a.bug]
    n = a.n or bug.world_size
    if n < bug.min_world_size:
        p.error(f"{bug.slug} needs at least {bug.min_world_size} ranks")
    variants = ["broken", "fixed"] if a.variant == "both" else [a.variant]
    debug = _debug(a)
    runs = []
    for v in variants:
        tl = None
        if a.timeline:
            root, ext = os.path.splitext(a.timeline)
            tl = f"{root}-{v}{ext or '.png'}" if len(variants) > 1 else a.timeline
        res, ok, why = run_variant(bug, v, n, gpu=a.gpu, debug=debug, timeline=tl)
        runs.append((v, res, ok, why, tl))
        if not a.json:
            _print_run(bug, v, res, ok, why, tl)
    all_ok = all(ok for _, _, ok, _, _ in runs)
    if a.json:
        print(json.dumps({"bug": bug.slug, "title": bug.title, "as_documented": all_ok,
                          "explanation": explanation(bug.doc),
                          "variants": [{"variant": v, "as_documented": ok, "expected": getattr(bug, v).describe(),
                                        "why_not": why, "result": res.to_dict()} for v, res, ok, why, _ in runs]}))
    else:
        print()
        print(f"Why ({bug.source}):")
        print(explanation(bug.doc))
    return 0 if all_ok else 1


def _run_all(bugs, a) -> int:
    """The whole catalogue, one line a variant; exit 0 only if every variant behaved as documented."""
    import time

    from sandbox.report import headline

    t0, rows, all_ok = time.monotonic(), [], True
    for bug in bugs.values():
        if bug.needs == "gpu" and not a.gpu:
            continue
        n = a.n or bug.world_size
        for v in (["broken", "fixed"] if a.variant == "both" else [a.variant]):
            res, ok, why = run_variant(bug, v, max(n, bug.min_world_size), gpu=a.gpu,
                                       debug=_debug(a))
            all_ok &= ok
            rows.append({"bug": bug.slug, "variant": v, "as_documented": ok, "why_not": why, "verdict": res.verdict,
                         "kind": res.diagnosis.kind, "wall_s": res.wall_s})
            if not a.json:
                mark = "as documented" if ok else "NOT as documented: " + "; ".join(why)
                print(f"{bug.slug:16} {v:7} {headline(res):44} {mark}", flush=True)
    total = time.monotonic() - t0
    if a.json:
        print(json.dumps({"as_documented": all_ok, "total_s": round(total, 2), "runs": rows}))
    else:
        good = sum(r["as_documented"] for r in rows)
        print(f"{good}/{len(rows)} variants as documented in {total:.1f} s")
    return 0 if all_ok else 1


def _print_run(bug, variant, res, ok, why, timeline) -> None:
    from rich.console import Console
    from rich.rule import Rule

    from sandbox import report

    out = sys.stdout
    console = Console(file=out, width=None if out.isatty() else 120, highlight=False)
    console.print(Rule(f"{bug.slug}: {variant}", align="left"))
    report.print_result(res, logs=True, max_log_lines=6)
    mark = "[green]as documented[/]" if ok else "[red]NOT as documented[/]: " + "; ".join(why)
    console.print(f"expected: {getattr(bug, variant).describe()} -> {mark}")
    if timeline:
        console.print(f"timeline: {timeline}")
    console.print()


if __name__ == "__main__":
    sys.exit(cli.guarded(main, "sandbox.repro"))
