"""The report in a terminal, through rich: `model.Report` drawn with the palette's colours (bold for the verdict,
one stable colour per rank in front of each line it printed). rich turns the palette's colours into the nearest ones
the terminal has, and honours NO_COLOR (no colour; bold stays) and a pipe (no codes at all). Not named `rich.py`, so
it never hides the library it uses."""
from __future__ import annotations

import sys

from sandbox.report import model


def _style(colour: str | None, bold: bool = False):
    from rich.style import Style
    return Style(color=colour, bold=bold or None)


def draw(rep: model.Report, file=None) -> None:
    from rich.console import Console  # imported when drawing: `import sandbox.report` stays cheap for the CLIs
    from rich.table import Table
    from rich.text import Text

    out = file or sys.stdout
    console = Console(file=out, highlight=False, soft_wrap=False, width=None if out.isatty() else 120)
    console.print(Text(rep.headline, style=_style(rep.colour, bold=True)))
    if rep.diagnosis:
        console.print(Text(rep.diagnosis, style=_style(None, bold=not rep.ok)))
    for b in rep.broken:
        console.print()
        console.print(Text.assemble((b.title, _style(model.AMBER, bold=True)), " ", b.text))
        console.print(Text("  " + b.rule_line, style=_style(model.GREY)))
    console.print()
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in model.COLUMNS:
        table.add_column(col, overflow="fold")
    for r in rep.rows:
        table.add_row(Text(r.label, style=_style(model.rank_colour(r.rank), bold=True)),
                      Text(r.outcome, style=_style(model.outcome_colour(r.outcome))), Text(r.pending), Text(r.site))
    console.print(table)
    if rep.logs:
        console.print()
    for log in rep.logs:
        prefix = (log.prefix, _style(model.rank_colour(log.rank)))
        if log.cut_line:
            console.print(Text.assemble(prefix, (log.cut_line, _style(model.GREY))))
        for line in log.lines:
            console.print(Text.assemble(prefix, line))


def print_result(res, logs: bool = True, file=None, max_log_lines: int = model.MAX_LOG_LINES,
                 strict: bool = False) -> None:
    """Print the report of a RunResult (with every rank's output under it: the last `max_log_lines` of each);
    `strict`: a run that broke a contract failed (`--strict`), and its headline says so."""
    draw(model.build(res, logs=logs, max_log_lines=max_log_lines, strict=strict), file=file)
