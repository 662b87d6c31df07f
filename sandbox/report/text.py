"""The report as plain text: for the pytest plugin's failure message, a print() outside Jupyter, and any place
where colour codes would be noise. Draws `model.Report` line by line, with the terminal's layout (the same words in
the same places, unwrapped and without colour)."""
from __future__ import annotations

from sandbox.report import model


def table(rows: tuple[model.Row, ...]) -> list[str]:
    """The table of ranks, columns left-aligned two spaces apart (as the terminal's)."""
    cells = [model.COLUMNS] + [r.cells() for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(model.COLUMNS))]
    return ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells]


def draw(rep: model.Report) -> str:
    lines = [rep.headline] + ([rep.diagnosis] if rep.diagnosis else [])
    for b in rep.broken:
        lines += ["", f"{b.title} {b.text}", f"  {b.rule_line}"]
    lines += [""] + table(rep.rows)
    if rep.logs:
        lines.append("")
    for log in rep.logs:
        if log.cut_line:
            lines.append(log.prefix + log.cut_line)
        lines += [log.prefix + line for line in log.lines]
    return "\n".join(lines)


def render(res, logs: bool = False, max_log_lines: int = model.MAX_LOG_LINES, strict: bool = False) -> str:
    """The report of a RunResult as plain text; every rank's output under it with `logs`; `strict`: a run that broke
    a contract failed, and its headline says so."""
    return draw(model.build(res, logs=logs, max_log_lines=max_log_lines, strict=strict))
