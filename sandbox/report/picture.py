"""The timeline picture of a run (`sandbox.report.timeline`): one row per rank, one bar per distributed call,
hatched where a call never returned, each rank's outcome beside its row, and the faults injected into simulated
nodes as dashed lines (a span while a link is down). Colours of outcomes come from the report's
palette; the ops get matplotlib's tab20. Where the run recorded it, the rank's own compute runs along the bottom of
its row, in greys: each backward (the notes a build-it check writes around it, `sandbox.course.work`) and each
optimizer step (the tracer's `optim` events); the forward is not measured, and not drawn.

Two rules keep it readable. The calls get the width: the axis starts just before the first traced call, and the
script's own start-up before it (imports, building a model: seconds, against calls that take milliseconds) is said
in the axis label instead of drawn. No two labels overlap: the outcomes stand outside the plot, as a second column
of tick labels, and the label of a rank's stuck calls is one box inside its row, moved left when it would run out
of the plot.
"""
from __future__ import annotations

from sandbox.report import model

MARGIN = 0.02  # of the calls' time span, either side of it


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


COMPUTE = {"forward": "0.75", "backward": "0.45", "optimizer step": "0.88"}  # grey levels of the compute strips


def compute(events: list[dict]) -> dict[str, list[tuple[int, float, float]]]:
    """What each rank computed, as (rank, start, end) by kind: forward and backward (between a note 'forward: start'
    or 'backward: start' and the next 'end': a build-it lab's code notes them) and optimizer steps (an `optim`
    event's `start` and `t`)."""
    from sandbox.events import noted_spans

    return {**{kind: [(r, a, b) for r, marked in noted_spans(events, kind).items() for a, b in marked]
               for kind in ("forward", "backward")},
            "optimizer step": [(e["rank"], e["start"], e["t"]) for e in events
                               if e.get("ev") == "optim" and e.get("start")]}


def _stuck_words(s: dict) -> str:
    text = s["op"] if s["op"] != "wait" else f"wait {s.get('of')}"
    text += f" #{s['seq']}" if s.get("seq") else ""
    return text + (f" peer {s['peer']}" if s.get("peer") is not None else "")


def draw(res):
    """The picture as a matplotlib Figure (not pyplot: drawing a file must not switch a notebook's backend)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    events = res.events
    calls = [e for e in events if e.get("ev") == "enter"]
    if not calls:
        raise ValueError("the run recorded no distributed calls to draw")
    t0 = min(e["t"] for e in calls)
    startup = t0 - min(e["t"] for e in events)  # from the first rank's start to the first call
    t_end = max(max(e["t"] for e in events), res.ended_at or 0) - t0
    span = max(t_end, 0.01)
    ranks = [r.rank for r in res.ranks]
    bars, stuck = spans(events, ranks)

    fig = Figure(figsize=(11, 1.3 + 0.55 * len(ranks)), layout="constrained")
    FigureCanvasAgg(fig)  # a canvas to measure the labels on
    ax = fig.subplots()
    palette = matplotlib.colormaps["tab20"]
    ops = sorted({s["op"] for lst in bars.values() for s, _, _ in lst} | {s["op"] for s in stuck})
    colour = {op: palette(i % 20) for i, op in enumerate(ops)}
    for rank, lst in bars.items():
        for s, end, err in lst:
            ax.barh(rank, max(end - s["t"], span * 0.002), left=s["t"] - t0, height=0.6, color=colour[s["op"]],
                    edgecolor=model.RED if err else "none", linewidth=1.5 if err else 0)
    computed = {k: v for k, v in compute(events).items() if v}
    for kind, lst in computed.items():  # a strip below the calls, so that a call during backward stays visible
        for rank, a, b in lst:
            ax.barh(rank + 0.38, max(b - a, span * 0.002), left=a - t0, height=0.16, color=COMPUTE[kind])
    by_rank: dict[int, list[dict]] = {}
    for s in sorted(stuck, key=lambda s: s["t"]):
        ax.barh(s["rank"], t_end - (s["t"] - t0), left=s["t"] - t0, height=0.6, color=colour[s["op"]], hatch="//",
                edgecolor=model.RED, linewidth=1.5)
        by_rank.setdefault(s["rank"], []).append(s)
    left = min([0.0] + [f["t"] - t0 for f in events if f.get("ev") == "fault"])  # a fault before the first call
    for f in (e for e in events if e.get("ev") == "fault" and e.get("label")):
        x = f["t"] - t0  # the faults injected into simulated nodes (sandbox.faults): a line, a span while it lasts
        if f.get("until"):
            ax.axvspan(x, min(f["until"] - t0, t_end), color=model.RED, alpha=0.08, linewidth=0)
        ax.axvline(x, color=model.RED, linestyle="--", linewidth=1.2)
        ax.annotate(f["label"], (x, 0), xycoords=("data", "axes fraction"), xytext=(3, 3),
                    textcoords="offset points", fontsize=8, color=model.RED, fontweight="bold")
    span = max(t_end - left, 0.01)
    ax.set_xlim(left - span * MARGIN, t_end + span * MARGIN)
    labels = [ax.text(lst[0]["t"] - t0 + span * 0.01, rank, "stuck: " + ", ".join(_stuck_words(s) for s in lst),
                      fontsize=8, va="center", fontweight="bold",
                      bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1})
              for rank, lst in by_rank.items()]

    hosts = {r.rank: r.host for r in res.ranks}
    several = len(set(hosts.values()) - {None}) > 1  # ranks on several simulated nodes: each row says its node
    ax.set_yticks(ranks, [f"rank {r} ({hosts[r]})" if several and hosts.get(r) else f"rank {r}" for r in ranks])
    ax.set_ylim(max(ranks) + 0.6, min(ranks) - 0.6)  # rank 0 on top (the compute strips end at rank + 0.46)
    outcomes = ax.secondary_yaxis("right")
    outcomes.set_yticks(ranks, [str(r.outcome) for r in res.ranks])
    outcomes.tick_params(length=0)
    for tick, r in zip(outcomes.get_yticklabels(), res.ranks):
        tick.set_color(model.outcome_colour(str(r.outcome)) or "black")
    fig.legend([Rectangle((0, 0), 1, 1, color=colour[o]) for o in ops]
               + [Rectangle((0, 0), 1, 0.3, color=COMPUTE[k]) for k in computed],
               ops + [f"{k} (compute)" for k in computed], loc="outside right upper", fontsize=8,
               frameon=False)  # outside the outcomes' column: the layout makes room for both
    xlabel = "seconds since the first distributed call"
    if round(startup, 2) > 0:  # said only where there is something to say
        xlabel += f" (the ranks' start-up before it, {startup:.2f} s, is not drawn)"
    ax.set_xlabel(xlabel)
    ax.set_title(model.headline(res) + "  (hatched: calls that never returned)", fontsize=10)

    for label in labels:
        label.set_in_layout(False)  # placed inside the plot: the layout must not shrink the plot to make room
    fig.draw_without_rendering()  # lays the figure out, so the labels can be measured where they will be
    right = ax.get_window_extent().x1 - 2
    moved = False
    for label in labels:
        if label.get_window_extent().x1 > right:  # it would run out of the plot: end it at the plot's edge
            label.set_horizontalalignment("right")
            label.set_x(t_end + span * MARGIN - span * 0.005)
            moved = True
    if moved:
        fig.draw_without_rendering()  # the label's box follows it at a draw
    return fig


def timeline(res, path: str) -> str:
    """Save a picture of every rank's distributed calls over time; calls that never returned are marked."""
    draw(res).savefig(path, dpi=110)
    return path
