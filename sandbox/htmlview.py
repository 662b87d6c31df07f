"""A run's report as self-contained HTML, for Jupyter (`RunResult._repr_html_`) and the docs site's rendered labs.

The same facts as the terminal report (`sandbox.report`), in the order a notebook reader wants them: the verdict,
the diagnosis sentence, a table of ranks (outcome, the call each was inside, its call site), then every rank's
output with its rank in front, capped like the terminal's. Inline styles only (notebook viewers strip <style>
and scripts from outputs they do not trust), mid-tone colours that read on light and dark themes, and every piece
of text escaped. Reads a result's fields without importing `sandbox.result`, so result.py can import this module.
"""
from __future__ import annotations

from html import escape

from sandbox.words import plural

# mid-tone colours: readable on a white page and on a dark theme alike
GREEN, RED, AMBER, GREY = "#2da44e", "#d1242f", "#c48a00", "#8c959f"
VERDICT_COLOUR = {"ok": GREEN, "error": RED, "crash": RED, "hang": AMBER, "timeout": AMBER, "interrupted": AMBER}
OUTCOME_COLOUR = {"ok": GREEN, "error": RED, "crashed": RED, "hung": AMBER, "stopped": GREY}
RANK_COLOURS = ["#1b9cc4", "#b04fc7", "#3a9e48", "#4f6fd0", "#b8860b", "#d0454f", "#17a2a2", "#c34fa0"]
MAX_LOG_LINES = 200

_BOX = "font-family: var(--jp-ui-font-family, system-ui, sans-serif); line-height: 1.45; margin: 0.2em 0"
_MONO = "font-family: var(--jp-code-font-family, ui-monospace, SFMono-Regular, Menlo, monospace); font-size: 0.9em"
_CELL = "text-align: left; padding: 0.1em 1.2em 0.1em 0; border: none; vertical-align: top"
_PRE = (f"{_MONO}; background: rgba(127, 127, 127, 0.10); color: inherit; padding: 0.5em 0.7em; margin: 0.4em 0;"
        " border-radius: 4px; white-space: pre-wrap; word-break: break-word")


def rank_colour(rank: int) -> str:
    return RANK_COLOURS[rank % len(RANK_COLOURS)]


def _span(text: str, colour: str, bold: bool = False) -> str:
    weight = "; font-weight: bold" if bold else ""
    return f'<span style="color: {colour}{weight}">{escape(text)}</span>'


def headline(res) -> str:
    colour = VERDICT_COLOUR.get(res.verdict, "inherit")
    return f'<div style="font-size: 1.05em">{_span(res.headline(), colour, True)}</div>'


def _mono(text: str) -> str:
    return f'<span style="{_MONO}">{escape(text)}</span>'


def table(res) -> str:
    """rank, outcome, pending call, site: one row a rank."""
    head = "".join(f'<th style="{_CELL}; font-weight: bold">{h}</th>'
                   for h in ("rank", "outcome", "pending call", "site"))
    rows = []
    for r in res.ranks:
        cells = [_span(str(r.rank), rank_colour(r.rank), True),
                 _span(r.outcome, OUTCOME_COLOUR.get(r.outcome, "inherit")), _mono(r.pending_words()), _mono(r.site())]
        rows.append("<tr>" + "".join(f'<td style="{_CELL}">{c}</td>' for c in cells) + "</tr>")
    return (f'<table style="border-collapse: collapse; margin: 0.4em 0; background: transparent">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def outputs(res, max_log_lines: int = MAX_LOG_LINES) -> str:
    """Every rank's output, one line per line with its rank in front (the last `max_log_lines` of each rank)."""
    lines = []
    for r in res.ranks:
        out = r.output.splitlines()
        prefix = _span(f"[rank {r.rank}] ", rank_colour(r.rank))
        if len(out) > max_log_lines:
            lines.append(prefix + _span(f"... {plural(len(out) - max_log_lines, 'earlier line')}", GREY))
            out = out[-max_log_lines:]
        lines += [prefix + escape(line) for line in out]
    if not lines:
        return ""
    return f'<pre style="{_PRE}">' + "\n".join(lines) + "</pre>"


def run_result(res, max_log_lines: int = MAX_LOG_LINES) -> str:
    """The whole report of a RunResult as one HTML fragment."""
    summary = f'<div style="margin: 0.3em 0; max-width: 60em">{escape(res.diagnosis.summary)}</div>'
    return (f'<div class="sandbox-result" style="{_BOX}">' + headline(res) + summary + warnings(res) + table(res)
            + outputs(res, max_log_lines) + "</div>")


def warnings(res) -> str:
    """The contracts the run broke (even one that finished): each a sentence, and the rule under it."""
    return "".join(
        f'<div class="sandbox-warning" style="margin: 0.3em 0; max-width: 60em; border-left: 3px solid {AMBER}; '
        f'padding-left: 0.5em">{_span("warning [" + w.kind + "]", AMBER, True)} {escape(w.summary)}'
        f'<div style="color: {GREY}">Rule: {escape(w.rule)}</div></div>' for w in getattr(res, "warnings", []))


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
