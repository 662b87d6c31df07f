"""Pictures of data moving: for each primitive what every rank held before and after the call, and the ring
all-reduce step by step, drawn from a real run's record (`sandbox.course.collectives.assemble`'s plain data; this
module imports nothing of the run, so the drawing does not depend on how the data was made).

Every chunk is a box coloured by the rank it came from; a sum is a box striped with the colours of the ranks summed
into it, labelled with their letters (a, b, c, d for ranks 0 to 3, plus the chunk number where a primitive splits
tensors into chunks). The colours are Okabe and Ito's, not the terminal's rank colours: four of them side by side
in one striped box must stay apart, for colour-blind readers too.

The drawing works in two steps, so a test can check the first without reading pixels: `boxes` / `ring_boxes` say
which box goes where with which origins and label (the model), `draw_primitive` / `draw_ring` draw exactly those.
Figures are matplotlib `Figure`s on an Agg canvas (never pyplot: a notebook's backend is left alone).
"""
from __future__ import annotations

from dataclasses import dataclass

RANK_COLOURS = ["#56B4E9", "#E69F00", "#009E73", "#CC79A7"]  # rank 0 sky blue, 1 orange, 2 green, 3 purple
LETTERS = "abcdefgh"
DPI = 100  # figures are sized in inches for the site's content width (about 800 px)
W, H = 0.86, 0.62  # a box's width and height, in a slot of 1 x 1
PRIM_WIDTH, PRIM_SCALE, PRIM_LEFT = 7.2, 0.56, 3.1  # a primitive's figure: inches wide, inches per slot, slots
#                                                     left of the first box (for "rank 0 (send to 1)")


@dataclass(frozen=True, kw_only=True)
class Box:
    """One box of a picture: the rank's row, which side of the call (before, after), its slot from the left."""
    rank: int
    side: str
    slot: int
    origins: tuple  # ((rank, chunk), ...) summed into it; () for an empty buffer
    label: str
    unspecified: bool = False  # the contract leaves this value unspecified: drawn hatched and faded


def colour(rank: int) -> str:
    return RANK_COLOURS[rank % len(RANK_COLOURS)]


def label(origins, chunked: bool) -> str:
    """"a", "a+b+c+d", "b2": the letters of the ranks summed into a box, with chunk numbers when `chunked`;
    "empty" for an empty buffer."""
    if not origins:
        return "empty"
    return "+".join(LETTERS[r] + (str(c) if chunked else "") for r, c in origins)


def names_chunks(prim: dict) -> bool:
    """Whether any element came from a chunk other than 0: then labels name chunks (a0, a1, ...)."""
    return any(c != 0 for side in ("before", "after") for rank in prim[side] for mix in rank for _, c in mix)


def boxes(prim: dict) -> list[Box]:
    """The boxes of one primitive's picture, from its record: each rank's elements before and after, in order."""
    chunked = names_chunks(prim)
    out = []
    for side in ("before", "after"):
        for rank, mixes in enumerate(prim[side]):
            for slot, mix in enumerate(mixes):
                origins = tuple(tuple(o) for o in mix)
                out.append(Box(rank=rank, side=side, slot=slot, origins=origins, label=label(origins, chunked),
                               unspecified=side == "after" and rank in prim.get("unspecified", ())))
    return out


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _box(ax, x: float, y: float, b: Box, fontsize: float = 9, w: float = W, h: float = H, edge: str = "#333333",
         lw: float = 0.8) -> None:
    """A box at (x, y) (its top left; y grows downwards): one stripe per origin, in that origin's rank colour."""
    from matplotlib.patches import Rectangle

    if not b.origins:  # an empty buffer: a dashed outline
        ax.add_patch(Rectangle((x, y), w, h, facecolor="white", edgecolor="#999999", linestyle="--", lw=0.8))
        ax.text(x + w / 2, y + h / 2, "empty", ha="center", va="center", fontsize=fontsize - 1, color="#777777")
        return
    n = len(b.origins)
    for i, (r, _) in enumerate(b.origins):
        ax.add_patch(Rectangle((x + i * w / n, y), w / n, h, facecolor=colour(r), edgecolor="none",
                               alpha=0.35 if b.unspecified else 1.0, hatch="///" if b.unspecified else None))
    ax.add_patch(Rectangle((x, y), w, h, facecolor="none", edgecolor=edge, lw=lw))
    ax.text(x + w / 2, y + h / 2, b.label, ha="center", va="center", fontsize=fontsize,
            color="#555555" if b.unspecified else "black",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1.2})


def _rank_label(ax, x: float, y: float, rank: int, text: str, fontsize: float = 9) -> None:
    from matplotlib.patches import Rectangle

    ax.add_patch(Rectangle((x - 0.36, y + H / 2 - 0.11), 0.22, 0.22, facecolor=colour(rank), edgecolor="none"))
    ax.text(x - 0.46, y + H / 2, text, ha="right", va="center", fontsize=fontsize)


def draw_primitive(prim: dict):
    """One primitive: the ranks as rows, what each held before the call on the left, after it on the right. Every
    primitive's figure has the same width and scale, so boxes are the same size all down the page."""
    bs = boxes(prim)
    n = len(prim["before"])
    wide_b = max(1, max(b.slot + 1 for b in bs if b.side == "before"))
    wide_a = max(1, max(b.slot + 1 for b in bs if b.side == "after"))
    longest = max(len(b.origins) for b in bs)
    unit = 1.0  # the after side's slot: wider where its labels are sums
    if longest == 4:
        unit = 2.5 if names_chunks(prim) else 1.6
    elif longest > 1:
        unit = 1.6 if names_chunks(prim) else 1.1
    roles = prim.get("roles") or [""] * n
    notes = {r: t for r, t in enumerate(prim.get("notes") or []) if t}
    x_after = wide_b + 1.4  # the arrow's lane between the two sides
    right = x_after + wide_a * unit
    top_in, span = 1.02, n - 1 + H + 0.15 + 0.55  # the header's inches; the rows' height in units
    height = top_in + span * PRIM_SCALE
    fig = _figure(PRIM_WIDTH, height)
    ax = fig.add_axes((0, 0, 1, span * PRIM_SCALE / height))
    ax.set_xlim(-PRIM_LEFT, -PRIM_LEFT + PRIM_WIDTH / PRIM_SCALE)
    ax.set_ylim(n - 1 + H + 0.15, -0.55)
    ax.set_axis_off()
    for r in range(n):
        _rank_label(ax, 0, r, r, f"rank {r}" + (f" ({roles[r]})" if roles[r] else ""))
        if r in notes:
            ax.text(right + 0.05, r + H / 2, notes[r], ha="left", va="center", fontsize=8, color="#555555",
                    style="italic")
    for b in bs:
        x = b.slot if b.side == "before" else x_after + b.slot * unit
        _box(ax, x, b.rank, b, w=(W if b.side == "before" else unit - (1 - W)))
    ax.text((wide_b - (1 - W)) / 2, -0.3, "before", ha="center", va="center", fontsize=9, color="#555555")
    ax.text(x_after + (wide_a * unit - (1 - W)) / 2, -0.3, "after", ha="center", va="center", fontsize=9,
            color="#555555")
    mid = (n - 1 + H) / 2
    ax.annotate("", xy=(x_after - 0.3, mid), xytext=(wide_b - 0.05, mid),
                arrowprops={"arrowstyle": "-|>,head_width=0.4,head_length=0.6", "lw": 2, "color": "#444444"})
    inch = 1 / height  # a figure fraction per inch, for the header
    fig.text(0.012, 1 - 0.08 * inch, prim["name"], ha="left", va="top", fontsize=12, fontweight="bold")
    fig.text(0.012, 1 - 0.40 * inch, prim["call"], ha="left", va="top", fontsize=9.5, family="monospace")
    fig.text(0.012, 1 - 0.66 * inch, prim["caption"], ha="left", va="top", fontsize=9.5, color="#333333")
    return fig


# ------------------------------------------------------------------------------------------------------ the ring

def ring_label(origins, world: int) -> str:
    """A box of the ring: "a+b" for a partial sum, "Σ" once every rank's chunk is in it (the boxes are small)."""
    return "Σ" if len(origins) == world else label(origins, False)


def ring_boxes(ring: dict) -> list[list[Box]]:
    """The boxes of each panel of the ring's picture: the start, then one panel per step (what every rank holds
    after it; `side` is "received" for the chunk a rank received in that step), then dist.all_reduce's result."""
    world = len(ring["start"])

    def panel(holds, received=None):
        return [Box(rank=r, side="received" if received and received[r] == k else "held", slot=k,
                    origins=tuple(tuple(o) for o in mix), label=ring_label(mix, world))
                for r, mixes in enumerate(holds) for k, mix in enumerate(mixes)]

    panels = [panel(ring["start"])]
    for step in ring["steps"]:
        panels.append(panel([r["holds"] for r in step["ranks"]], [r["recv"] for r in step["ranks"]]))
    panels.append(panel(ring["all_reduce"]))
    return panels


def _ring_panel(ax, bs: list[Box], title: str, sends: list[dict] | None, n: int, chunks: int) -> None:
    ax.set_xlim(-1.45, chunks + 0.35)
    ax.set_ylim(n - 1 + H + 0.55, -0.95)
    ax.set_axis_off()
    ax.set_title(title, fontsize=9.5, loc="left", pad=2)
    for k in range(chunks):
        ax.text(k + W / 2, -0.72, f"chunk {k}", ha="center", va="center", fontsize=7.5, color="#555555")
    for r in range(n):
        _rank_label(ax, -0.05, r, r, f"rank {r}", fontsize=8)
    for b in bs:
        got = b.side == "received"
        _box(ax, b.slot, b.rank, b, fontsize=8, edge="black" if got else "#333333", lw=2.2 if got else 0.8)
    if not sends:
        return
    arrow = {"arrowstyle": "-|>,head_width=0.25,head_length=0.4", "lw": 1.4, "color": "#222222",
             "shrinkA": 0, "shrinkB": 0}
    for r, s in enumerate(sends):
        x = s["send"] + W / 2
        if s["to"] == r + 1:  # down to the next row, into the same chunk
            ax.annotate("", xy=(x, s["to"] - 0.02), xytext=(x, r + H + 0.02), arrowprops=arrow)
        else:  # the ring closes: out of the bottom, round the right edge, into the top row from above
            lane_x, low, high = chunks + 0.05, r + H + 0.22, -0.22
            ax.plot([x, x, lane_x, lane_x, x], [r + H + 0.02, low, low, high, high], color="#222222", lw=1.4,
                    solid_joinstyle="round")
            ax.annotate("", xy=(x, s["to"] - 0.02), xytext=(x, high), arrowprops=arrow)


def draw_ring(ring: dict):
    """The ring all-reduce, one small panel per step: the reduce-scatter phase down the left column, the
    all-gather phase down the right one, ending with dist.all_reduce's result for the same input."""
    panels = ring_boxes(ring)
    n, chunks = len(ring["start"]), len(ring["start"][0])
    titles = ["start: every rank holds its own chunks"]
    sends = [None]
    for step in ring["steps"]:
        verb = "add" if step["phase"] == "reduce-scatter" else "keep"
        titles.append(f"{step['phase']} step {step['step']}: send, {verb}")
        sends.append(step["ranks"])
    titles.append("dist.all_reduce, same input")
    sends.append(None)
    fig = _figure(8.0, 10.4)
    grid = fig.add_gridspec(4, 2, left=0.01, right=0.99, top=0.9, bottom=0.01, wspace=0.04, hspace=0.16)
    half = (len(panels) + 1) // 2
    for i, (bs, title, snd) in enumerate(zip(panels, titles, sends)):
        ax = fig.add_subplot(grid[i % half, i // half])
        _ring_panel(ax, bs, title, snd, n, chunks)
    fig.text(0.01, 0.995, f"Ring all-reduce on {n} ranks, recorded step by step", ha="left", va="top",
             fontsize=12, fontweight="bold")
    fig.text(0.01, 0.967, "Arrow: the chunk each rank sends to the next rank in that step (isend + irecv). Thick "
             "outline: the chunk it received,\nadded to its own (reduce-scatter) or kept (all-gather). "
             "a, b, c, d: that chunk of rank 0, 1, 2, 3; Σ = a+b+c+d.", ha="left", va="top", fontsize=8.5,
             color="#333333")
    return fig


def save(fig, path: str) -> str:
    fig.savefig(path, dpi=DPI)
    return path
