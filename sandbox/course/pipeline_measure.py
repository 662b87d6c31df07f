"""Lab 25's measurements of a pipeline run, read from its events: the bubble (time inside torch.distributed calls
between the schedule's first and last barrier) against GPipe's formula, and the micro-batches each stage holds,
over time and at its peak (the notes of `pipeline.forward` and `pipeline.backward`, else the order of its
point-to-point calls). `sandbox.course.pipeline` re-exports every name here."""
from __future__ import annotations


def bubble_formula(p: int, m: int) -> float:
    """GPipe's bubble: the idle fraction of every stage, (p - 1) / (m + p - 1)."""
    return (p - 1) / (m + p - 1)


def _calls(res, rank: int) -> list[tuple[dict, float | None]]:
    """A rank's calls in order: (its enter event, the time it returned, None if it never did)."""
    enters, exits = {}, {}
    for e in res.events:
        if e.get("rank") == rank and e.get("ev") in ("enter", "exit"):
            (enters if e["ev"] == "enter" else exits)[e["id"]] = e
    return [(enters[i], exits[i]["t"] if i in exits else None) for i in sorted(enters)]


def bubble(res) -> dict[int, float]:
    """Each rank's idle fraction, from the run's events: the time inside torch.distributed calls after the first
    barrier returned, until the last barrier returned, over that window. Needs a run that finished."""
    idle = {}
    for r in range(res.world_size):
        calls = [(e, t) for e, t in _calls(res, r) if t is not None]
        barriers = [(e, t) for e, t in calls if e["op"] == "barrier"]
        if len(barriers) < 2:
            raise ValueError(f"rank {r} made {len(barriers)} barrier calls: a schedule starts with start() and ends "
                             "with finish(), which make one each.")
        t0, t1 = barriers[0][1], barriers[-1][1]
        waited = sum(t - e["t"] for e, t in calls if e["t"] >= t0 and t <= t1)
        idle[r] = waited / (t1 - t0)
    return idle


GUESS_TOLERANCE = 0.02  # a guess of the bubble is right within this of the formula (its answer has two decimals)


def bubble_line(name: str, res, m: int, predicted: float | None = None) -> str:
    """'GPipe, p=4, m=4: idle per rank 0.47 0.45 0.44 0.45 (mean 0.45); (p-1)/(m+p-1) = 0.43; you said 0.25:
    wrong'. The guess is graded against the formula, which is what the question asks for (equal steps, free
    messages); the measured bubble sits a little above it."""
    idle = bubble(res)
    p = res.world_size
    said = ""
    if predicted is not None:
        right = abs(predicted - bubble_formula(p, m)) <= GUESS_TOLERANCE
        said = f"; you said {predicted:.2f}: {'right' if right else 'wrong'}"
    return (f"{name}, p={p}, m={m}: idle per rank {' '.join(f'{v:.2f}' for v in idle.values())} (mean "
            f"{sum(idle.values()) / p:.2f}); (p-1)/(m+p-1) = {bubble_formula(p, m):.2f}{said}")


def held(res) -> dict[int, int]:
    """{rank: the most micro-batches it held at once}: `holding`'s counts."""
    return {r: k for r, (k, _) in holding(res).items()}


def held_over_time(res) -> dict[int, list[tuple[float, int]]]:
    """{rank: [(t, micro-batches it holds from t on), ...]} from the notes of the lab's `forward` (its start takes a
    micro-batch in) and `backward` (its end lets one go), t in the run's clock; a rank that wrote none is absent."""
    now: dict[int, int] = {}
    out: dict[int, list[tuple[float, int]]] = {}
    for e in res.events:
        said = (e.get("fields") or {}) if e.get("ev") == "note" else {}
        r = e.get("rank")
        step = 1 if said.get("forward") == "start" else -1 if said.get("backward") == "end" else 0
        if step:
            now[r] = now.get(r, 0) + step
            out.setdefault(r, []).append((e["t"], now[r]))
    return out


def holding(res) -> dict[int, tuple[int, bool]]:
    """{rank: (the most micro-batches it held at once, exact)}: forwards begun minus backwards done. Exact where the
    stage ran the lab's `forward` and `backward`, whose notes say when each began and ended (`held_over_time`): a
    micro-batch is held from its forward's start until its backward's end. Otherwise read from the order of the
    stage's point-to-point calls, which can be one ahead (a recv posted for the next micro-batch before its
    forward): stage r > 0 begins a forward with a recv from r - 1 and ends a backward with a send to it; stage 0
    ends a forward with a send to 1 and begins a backward with a recv from 1."""
    from sandbox.calls import p2p_ops
    timed = held_over_time(res)
    most = {}
    for r in range(res.world_size):
        if timed.get(r):
            most[r] = (max(k for _, k in timed[r]), True)
            continue
        now_r = top = 0
        for e, _ in _calls(res, r):
            for direction, peer, _tag in p2p_ops(e):
                if r > 0 and peer == r - 1:
                    now_r += 1 if direction == "recv" else -1
                elif r == 0 and peer == 1:
                    now_r += 1 if direction == "send" else -1
                top = max(top, now_r)
        most[r] = (top, False)
    return most


def held_png(runs: dict) -> bytes:
    """A PNG: for each named run ({"GPipe": res, "1F1B": res}), one panel of the micro-batches each stage holds over
    time (its activations, the memory 1F1B saves), from `held_over_time`; time from the first note of the run."""
    from io import BytesIO

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 1.6 + 1.4 * len(runs)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(runs), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    for ax, (name, res) in zip(axes, runs.items()):
        timed = held_over_time(res)
        t0 = min(t for steps in timed.values() for t, _ in steps)
        for r, steps in sorted(timed.items()):
            ts, ks = [0.0] + [t - t0 for t, _ in steps], [0] + [k for _, k in steps]
            ax.step(ts, ks, where="post", label=f"stage {r}")
        ax.set_title(f"{name}: micro-batches held (activations kept for backward)", fontsize=10)
        ax.set_ylabel("held")
        ax.legend(loc="upper right", fontsize=8)
    axes[-1].set_xlabel("seconds since the first forward")
    out = BytesIO()
    fig.savefig(out, format="png", dpi=90)
    return out.getvalue()
