"""The report as self-contained HTML, for Jupyter (`RunResult._repr_html_`), the labs' checks (`check`) and the docs
site's rendered notebooks: `model.Report` drawn in the palette's colours.

Inline styles only (notebook viewers strip <style> and scripts from outputs they do not trust), colours that read
on light and dark themes, and every piece of text escaped.
"""
from __future__ import annotations

from html import escape

from sandbox.report import model
from sandbox.report.model import GREEN, GREY, MAX_LOG_LINES, RED, rank_colour  # noqa: F401  (rank_colour: for callers)

_BOX = "font-family: var(--jp-ui-font-family, system-ui, sans-serif); line-height: 1.45; margin: 0.2em 0"
_MONO = "font-family: var(--jp-code-font-family, ui-monospace, SFMono-Regular, Menlo, monospace); font-size: 0.9em"
_CELL = "text-align: left; padding: 0.1em 1.2em 0.1em 0; border: none; vertical-align: top"
_PRE = (f"{_MONO}; background: rgba(127, 127, 127, 0.10); color: inherit; padding: 0.5em 0.7em; margin: 0.4em 0;"
        " border-radius: 4px; white-space: pre-wrap; word-break: break-word")
_PROSE = "margin: 0.3em 0; max-width: 60em"


def _span(text: str, colour: str | None, bold: bool = False) -> str:
    weight = "; font-weight: bold" if bold else ""
    return f'<span style="color: {colour or "inherit"}{weight}">{escape(text)}</span>'


def _mono(text: str) -> str:
    return f'<span style="{_MONO}">{escape(text)}</span>'


def table(rows: tuple[model.Row, ...]) -> str:
    """rank, outcome, pending call, site: one row a rank."""
    head = "".join(f'<th style="{_CELL}; font-weight: bold">{escape(h)}</th>' for h in model.COLUMNS)
    body = []
    for r in rows:
        cells = [_span(r.label, rank_colour(r.rank), True), _span(r.outcome, model.outcome_colour(r.outcome)),
                 _mono(r.pending), _mono(r.site)]
        body.append("<tr>" + "".join(f'<td style="{_CELL}">{c}</td>' for c in cells) + "</tr>")
    return (f'<table style="border-collapse: collapse; margin: 0.4em 0; background: transparent">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def _broken(b: model.Broken) -> str:
    return (f'<div class="sandbox-warning" style="{_PROSE}; border-left: 3px solid {model.AMBER}; padding-left: 0.5em">'
            f'{_span(b.title, model.AMBER, True)} {escape(b.text)}'
            f'<div style="color: {GREY}">{escape(b.rule_line)}</div></div>')


def logs(rep: model.Report) -> str:
    """Every rank's output, one line per line with its rank in front."""
    lines = []
    for log in rep.logs:
        prefix = _span(log.prefix, rank_colour(log.rank))
        if log.cut_line:
            lines.append(prefix + _span(log.cut_line, GREY))
        lines += [prefix + escape(line) for line in log.lines]
    return f'<pre style="{_PRE}">' + "\n".join(lines) + "</pre>" if lines else ""


def draw(rep: model.Report) -> str:
    """The whole report as one HTML fragment."""
    head = f'<div style="font-size: 1.05em">{_span(rep.headline, rep.colour, True)}</div>'
    why = f'<div style="{_PROSE}">{escape(rep.diagnosis)}</div>' if rep.diagnosis else ""
    return (f'<div class="sandbox-result" style="{_BOX}">' + head + why + "".join(_broken(b) for b in rep.broken)
            + table(rep.rows) + logs(rep) + "</div>")


def run_result(res, max_log_lines: int = MAX_LOG_LINES) -> str:
    """The report of a RunResult as one HTML fragment, every rank's output included."""
    return draw(model.build(res, logs=True, max_log_lines=max_log_lines))


def banner(ok: bool, title: str, message: str) -> str:
    """A check's answer in one line: a mark and a word in colour, then the sentence."""
    colour = GREEN if ok else RED
    mark = "\u2714" if ok else "\u2718"
    return (f'<div style="{_BOX}; border-left: 4px solid {colour}; padding: 0.2em 0 0.2em 0.7em">'
            f"{_span(mark + ' ' + title, colour, True)} {escape(message)}</div>")


def check(ok: bool, title: str, message: str, res=None, max_log_lines: int = MAX_LOG_LINES) -> str:
    """A check's answer, and under it (folded away when the answer is right) the run it is based on."""
    html = banner(ok, title, message)
    if res is not None:
        html += (f'<details{"" if ok else " open"} style="{_BOX}; margin-top: 0.4em"><summary style="cursor: pointer">'
                 f"the run</summary>{run_result(res, max_log_lines)}</details>")
    return f'<div class="sandbox-check">{html}</div>'
