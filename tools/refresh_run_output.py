"""Re-run every bug of the catalogue and paste the real output into the "Run:" section of its module docstring.

    python tools/refresh_run_output.py [slug ...]

The Run section is the line `Run: python -m sandbox.repro <slug>` and the indented lines under it: per variant its
headline, the diagnosis (of a run that did not finish), the kinds of contract warnings it carried, and the
expectation it met. A variant that does not meet it stops the tool before its module is written."""
import importlib
import os
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.chdir(ROOT)

from sandbox.bugs import registry, run_variant  # noqa: E402


def run_section(bug) -> list[str]:
    lines = [f"Run: python -m sandbox.repro {bug.slug}"]
    for variant in ("broken", "fixed"):
        res, ok, why = run_variant(bug, variant, bug.world_size)
        if not ok:
            raise SystemExit(f"{bug.slug} {variant} did not behave as documented: {why}")
        lines.append(f"    {variant}: {res.headline()}")
        if res.verdict != "ok":
            lines += textwrap.wrap(res.diagnosis.summary, 110, initial_indent="      ", subsequent_indent="      ")
        if res.warnings:  # the contracts it broke, by kind: their sentences are in the report above them
            lines.append(f"      Warnings: {', '.join(sorted({w.kind for w in res.warnings}))}.")
        lines.append(f"      expected: {bug.expect(variant).describe()} -> as documented")
    return lines


def main():
    bugs = registry()
    for slug in sys.argv[1:] or list(bugs):
        if slug not in bugs:
            raise SystemExit(f"unknown bug {slug!r}; known: {', '.join(bugs)}.")
        bug = bugs[slug]
        path = importlib.import_module(bug.module).__file__
        src = open(path).read()
        doc_end = src.index('"""', 3)
        head, doc, tail = src[:3], src[3:doc_end], src[doc_end:]
        lines = doc.split("\n")
        start = next(i for i, line in enumerate(lines) if line.startswith(f"Run: python -m sandbox.repro {slug}"))
        end = start + 1
        while end < len(lines) and lines[end].startswith(" "):
            end += 1
        lines[start:end] = run_section(bug)
        with open(path, "w") as f:
            f.write(head + "\n".join(lines) + tail)
        print(f"{slug}: Run section refreshed")


if __name__ == "__main__":
    main()
