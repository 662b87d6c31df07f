"""RunResult -> the terminal (rich), plain text, and a timeline picture.

The terminal report reads top-down: the verdict in one line, a table of ranks (outcome, the call each was inside,
its call site), the diagnosis sentence, then every rank's output with its rank in front, one stable colour per rank.
NO_COLOR is honoured (by rich).
"""
from __future__ import annotations

import sys

from sandbox.result import RunResult
from sandbox.words import plural

_VERDICT_STYLE = {"ok": "bold green", "error": "bold red", "crash": "bold red", "hang": "bold yellow",
                  "timeout": "bold yellow", "interrupted": "bold yellow"}
_OUTCOME_STYLE = {"ok": "green", "error": "red", "crashed": "red", "hung": "yellow", "stopped": "dim"}
_RANK_COLOURS = ["cyan", "magenta", "green", "blue", "yellow", "bright_red", "bright_cyan", "bright_magenta"]


def headline(res: RunResult) -> str:
    return res.headline()


def plain(res: RunResult, logs: bool = False) -> str:
    return res.text(logs=logs)


def print_result(res: RunResult, logs: bool = True, file=None, max_log_lines: int = 200) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    out = file or sys.stdout
    console = Console(file=out, highlight=False, soft_wrap=False,
                      width=None if out.isatty() else 120)
    console.print(Text(headline(res), style=_VERDICT_STYLE.get(res.verdict, "bold")))
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("rank", "outcome", "pending call", "site"):
        table.add_column(col, overflow="fold")
    for r in res.ranks:
        table.add_row(Text(str(r.rank), style=_RANK_COLOURS[r.rank % len(_RANK_COLOURS)]),
                      Text(r.outcome, style=_OUTCOME_STYLE.get(r.outcome, "")), escape(r.pending_words()), escape(r.site()))
    console.print(table)
    console.print()
    console.print(Text(res.diagnosis.summary, style="bold" if res.verdict != "ok" else ""))
    for w in res.warnings:
        console.print()
        t = Text(f"Warning [{w.kind}]: ", style="bold yellow")
        t.append(w.summary)
        console.print(t)
        console.print(Text(f"  Rule: {w.rule}", style="dim"))
    if logs:
        any_output = False
        for r in res.ranks:
            out = r.output.splitlines()
            if not out:
                continue
            if not any_output:
                console.print()
                any_output = True
            if len(out) > max_log_lines:
                console.print(Text(f"[rank {r.rank}] ... {plural(len(out) - max_log_lines, 'earlier line')}",
                                   style="dim"))
                out = out[-max_log_lines:]
            style = _RANK_COLOURS[r.rank % len(_RANK_COLOURS)]
            for line in out:
                t = Text(f"[rank {r.rank}] ", style=style)
                t.append(line)
                console.print(t)


def spans(events: list[dict], ranks: list[int]) -> tuple[dict[int, list], list[dict]]:
    """Every finished call as (enter event, end time, raised?) per rank, and the calls that never finished.
    An NCCL call that returned to Python but still ran on the GPU ends at its "done", not at its exit."""
    opened: dict = {}
    bars: dict[int, list] = {r: [] for r in ranks}
    for e in events:
        if e.get("ev") == "enter":
            opened[(e["rank"], e["id"])] = e
        elif e.get("ev") == "done" or (e.get("ev") == "exit" and not e.get("inflight")):
            s = opened.pop((e["rank"], e.get("id")), None)
            if s is not None:
                bars.setdefault(s["rank"], []).append((s, e["t"], bool(e.get("error"))))
    return bars, list(opened.values())


def timeline(res: RunResult, path: str) -> str:
    """Save a picture of every rank's distributed calls over time; calls that never returned are marked."""
    import matplotlib
    from matplotlib.figure import Figure  # not pyplot: drawing a file must not switch a notebook's backend
    from matplotlib.patches import Rectangle

    events = res.events
    if not events:
        raise ValueError("the run recorded no events to draw")
    t0 = min(e["t"] for e in events)
    t_end = max(max(e["t"] for e in events), res.ended_at or 0) + 0.01
    bars, stuck = spans(events, [r.rank for r in res.ranks])
    fig_h = 1.2 + 0.55 * len(bars)
    fig = Figure(figsize=(11, fig_h))
    ax = fig.subplots()
    palette = matplotlib.colormaps["tab20"]
    ops = sorted({s["op"] for lst in bars.values() for s, _, _ in lst} | {s["op"] for s in stuck})
    colour = {op: palette(i % 20) for i, op in enumerate(ops)}
    for rank, lst in bars.items():
        for s, end, err in lst:
            ax.barh(rank, max(end - s["t"], 0.002), left=s["t"] - t0, height=0.6, color=colour[s["op"]],
                    edgecolor="red" if err else "none", linewidth=1.5 if err else 0)
    for s in stuck:
        ax.barh(s["rank"], t_end - s["t"], left=s["t"] - t0, height=0.6, color=colour[s["op"]], hatch="//",
                edgecolor="red", linewidth=1.5)
        label = f"stuck: {s['op'] if s['op'] != 'wait' else 'wait ' + str(s.get('of'))}"
        if s.get("seq"):
            label += f" #{s['seq']}"
        ax.text(s["t"] - t0 + (t_end - t0) * 0.01, s["rank"], label, fontsize=8, color="black", va="center",
                fontweight="bold", bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1})
    for r in res.ranks:
        ax.text(t_end - t0, r.rank, f"  {r.outcome}", va="center", fontsize=9,
                color={"ok": "green", "hung": "darkorange"}.get(r.outcome, "red"))
    handles = [Rectangle((0, 0), 1, 1, color=colour[o]) for o in ops]
    ax.legend(handles, ops, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_yticks(list(bars))
    ax.set_yticklabels([f"rank {r}" for r in bars])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first distributed call")
    ax.set_xlim(0, (t_end - t0) * 1.12)
    ax.set_title(headline(res) + "  (hatched: calls that never returned)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
