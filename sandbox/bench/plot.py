"""The sweep as pictures (`python -m sandbox.bench --plot DIR`): latency and bus bandwidth against size, one line
per op, one pair of PNGs per world size, with the copy limit (busbw) and the barrier (latency) drawn in."""
from __future__ import annotations

import os

from sandbox.bench.stats import OPS


def _one(points: list[dict], memcpy: dict[int, float], n: int, what: str, key: str, label: str, gpu: bool):
    from matplotlib.figure import Figure  # not pyplot: drawing a file must not switch a notebook's backend

    fig = Figure(figsize=(8, 5))
    ax = fig.add_subplot()
    mine = [p for p in points if p["n"] == n and p["op"] != "barrier"]
    for op in OPS:
        xs = [(p["size_bytes"], p[key]) for p in mine if p["op"] == op]
        if xs:
            ax.plot([x for x, _ in xs], [y for _, y in xs], marker="o", label=op)
    if what == "busbw" and memcpy.get(n):
        ax.axhline(memcpy[n], color="black", linestyle="--",
                   label=f"{'device' if gpu else 'memory'} copy {memcpy[n]:.3g} GB/s")
    bar = [p for p in points if p["n"] == n and p["op"] == "barrier"]
    if what == "latency" and bar:
        ax.axhline(bar[0]["lat_median_s"], color="grey", linestyle=":", label="barrier")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes, nccl-tests' definition)")
    ax.set_ylabel(label)
    ax.set_title(f"{'NCCL' if gpu else 'gloo'}, {n} ranks: {what}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def plot(points: list[dict], memcpy: dict[int, float], outdir: str, gpu: bool = False) -> list[str]:
    """latency-n{N}.png and busbw-n{N}.png in `outdir`: one line per op against size, the copy limit drawn in."""
    os.makedirs(outdir, exist_ok=True)
    written = []
    for n in sorted({p["n"] for p in points}):
        for what, key, label in (("latency", "lat_median_s", "latency (s, median)"),
                                 ("busbw", "busbw_GBps", "bus bandwidth (GB/s)")):
            path = os.path.join(outdir, f"{what}-n{n}.png")
            _one(points, memcpy, n, what, key, label, gpu).savefig(path, dpi=100, bbox_inches="tight")
            written.append(path)
    return written
