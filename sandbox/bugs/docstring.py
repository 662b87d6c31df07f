"""A bug module's docstring, read once: its parts by name, for every reader (`python -m sandbox.repro`'s "Why", its
`--json`, the docs pages, the labs).

The docstring is written in parts, each starting on a line of its own with its label and a colon:

    kv-sync: one line that says what breaks          <- the intro (no label)
    Source: where the bug comes from
    Symptom: what a user sees
    Root cause: why
    Fix: what to change
    Simulated on CPU: what the sandbox stands in for (only where hardware is absent)
    On GPUs (NCCL): how NCCL behaves differently from gloo (only for a bug with a --gpu form)
    Run: python -m sandbox.repro <slug>               <- the real output, pasted (tools/refresh_run_output.py)

A part runs until the next labelled line, blank lines and all. Torch-free.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_LABEL = re.compile(r"^(Source|Symptom|Root cause|Fix|Simulated[^:]*|On GPUs \(NCCL\)|Run):\s?(.*)$")
EXPLAINED = ("Symptom", "Root cause", "Fix", "Simulated", "On GPUs")  # what "Why" shows: not the Source, not the Run


@dataclass(frozen=True)
class Part:
    key: str     # "Symptom", "Root cause", "Fix", "Simulated", "On GPUs", "Source", "Run" or "intro"
    label: str   # as written: "Simulated on CPU", "On GPUs (NCCL)"
    text: str    # the part without its label, stripped


def parse(doc: str) -> list[Part]:
    """The parts of a bug module's docstring, in the order they are written."""
    found: list[tuple[str, str, list[str]]] = [("intro", "", [])]
    for line in doc.strip("\n").splitlines():
        m = _LABEL.match(line)
        if m:
            label = m.group(1)
            found.append((_key(label), label, [m.group(2)]))
        else:
            found[-1][2].append(line)
    return [Part(key, label, "\n".join(lines).strip()) for key, label, lines in found]


def _key(label: str) -> str:
    """"Simulated on CPU" -> "Simulated", "On GPUs (NCCL)" -> "On GPUs": a reader asks for the part, not its words."""
    return "Simulated" if label.startswith("Simulated") else label.split(" (")[0]


def explanation(parts: list[Part]) -> str:
    """The Symptom / Root cause / Fix / Simulated / On GPUs parts, as written (labels included), one blank line
    between them: what `python -m sandbox.repro` prints under "Why" and its --json calls "explanation"."""
    return "\n\n".join(f"{p.label}: {p.text}" for p in parts if p.key in EXPLAINED)


def first_paragraph(text: str) -> str:
    """The first paragraph of a part, on one line."""
    return " ".join(re.split(r"\n\s*\n", text, maxsplit=1)[0].split())
