"""Lab 21, what a collective costs: the alpha-beta model of ring collectives, read back from a measured fit, and the
bucket-size trade-off of data parallelism it explains.

The lab measures with the project's bench (`sandbox.bench`: its sweep times the calls, its `alpha_beta` fits
latency = A + size/B to them); this module holds only the model, so that the notebook shows the reasoning and not
arithmetic. It takes the bench's dicts as plain data and does not import the bench, which sits a layer above.

- A ring collective is `steps` messages in a row, each of size/n bytes (one of size for send_recv):
  time = steps * alpha + bus_factor * size / beta, with alpha the cost of one message and beta the bandwidth of
  one link. A fitted line A + size/B is that model with alpha = A / steps and beta = B * bus_factor: the link's
  bandwidth is what nccl-tests calls bus bandwidth (`ring_alpha_beta`, `collective_s`).
- Data parallelism all-reduces the gradients in buckets while backward runs. Each bucket's call pays A, so small
  buckets pay it often; a bucket can start only once its last gradient exists, so big buckets start late and the
  last one runs after backward, uncovered. `bucket_plan` plays that timeline out for one bucket size (a backward
  that yields gradients at a steady rate, one call at a time), and `choose_bucket` compares a few sizes.
"""
from __future__ import annotations

import io
import math

# The ring's number of messages in a row and its bus factor (the share of `size` each rank sends), per op, as
# functions of the world size n. size is nccl-tests' (the bench's): all_reduce's buffer, all_gather's output,
# reduce_scatter's input; send_recv is one message.
STEPS = {"all_reduce": lambda n: 2 * (n - 1), "all_gather": lambda n: n - 1, "reduce_scatter": lambda n: n - 1,
         "send_recv": lambda n: 1}
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "send_recv": lambda n: 1.0}
MIB, KIB = 1 << 20, 1 << 10
BUCKETS = (64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB)  # the sizes `choose_bucket` compares by default


def _known(op: str) -> None:
    if op not in STEPS:
        raise ValueError(f"the ring model covers {', '.join(STEPS)}, not {op!r}.")


def collective_s(op: str, size_bytes: float, n: int, alpha_s: float, beta_Bps: float) -> float:
    """The ring model's time for one call: steps(n) * alpha + bus_factor(n) * size / beta."""
    _known(op)
    return STEPS[op](n) * alpha_s + BUS_FACTOR[op](n) * size_bytes / beta_Bps


def ring_alpha_beta(fit: dict) -> dict:
    """A line fitted by the bench (`bench.alpha_beta`: {"op", "n", "alpha_s", "beta_GBps"}, latency = alpha_s +
    size / beta) read as the ring model: {"alpha_s": one message's cost, "beta_Bps": one link's bandwidth, "steps"}.
    """
    op, n = fit["op"], fit["n"]
    _known(op)
    if not fit.get("beta_GBps"):
        raise ValueError(f"the {op} fit has no bandwidth (its time did not grow with size): measure larger sizes.")
    steps = STEPS[op](n)
    return {"alpha_s": fit["alpha_s"] / steps, "beta_Bps": fit["beta_GBps"] * 1e9 * BUS_FACTOR[op](n),
            "steps": steps}


# ------------------------------------------------------------------------------------------------ buckets

def bucket_plan(grad_bytes: int, bucket_bytes: int, call_s: float, Bps: float, backward_s: float) -> dict:
    """One data-parallel step's communication, bucket by bucket: backward makes `grad_bytes` of gradients at a
    steady rate over `backward_s`; a bucket's all_reduce (call_s + bytes / Bps) starts when its last gradient is
    made and the previous call is done. Returns {"bucket_bytes", "calls", "comm_s" (all calls' time), "exposed_s"
    (how long the step waits for communication after backward ends)}."""
    if grad_bytes <= 0 or bucket_bytes <= 0:
        raise ValueError("the gradients and the bucket need a positive number of bytes.")
    calls = math.ceil(grad_bytes / bucket_bytes)
    done = 0.0  # when the previous call ended
    comm = 0.0
    for i in range(calls):
        size = min(bucket_bytes, grad_bytes - i * bucket_bytes)
        ready = backward_s * min(1.0, (i + 1) * bucket_bytes / grad_bytes)
        took = call_s + size / Bps
        done = max(done, ready) + took
        comm += took
    return {"bucket_bytes": bucket_bytes, "calls": calls, "comm_s": comm, "exposed_s": max(0.0, done - backward_s)}


def choose_bucket(grad_bytes: int, call_s: float, Bps: float, backward_s: float,
                  buckets: tuple[int, ...] = BUCKETS) -> tuple[dict, list[dict]]:
    """The plan of each bucket size (those larger than the gradients become one bucket of all of them), and the
    one that leaves the least communication after backward (the smallest such size on a tie: it starts earliest)."""
    sizes = sorted({min(b, grad_bytes) for b in buckets})
    plans = [bucket_plan(grad_bytes, b, call_s, Bps, backward_s) for b in sizes]
    best = min(plans, key=lambda p: (round(p["exposed_s"], 9), p["bucket_bytes"]))
    return best, plans


def fmt_bytes(b: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", KIB)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"


def fmt_s(s: float) -> str:
    return f"{s * 1e6:.3g} us" if abs(s) < 1e-3 else f"{s * 1e3:.3g} ms" if abs(s) < 1 else f"{s:.3g} s"


def plan_table(plans: list[dict], best: dict | None = None) -> str:
    """The plans as a small table, the chosen one marked."""
    head = f"{'bucket':>10}  {'calls':>5}  {'all calls':>10}  {'after backward':>14}"
    rows = [f"{fmt_bytes(p['bucket_bytes']):>10}  {p['calls']:>5}  {fmt_s(p['comm_s']):>10}  "
            f"{fmt_s(p['exposed_s']):>14}{'  <- chosen' if p is best else ''}" for p in plans]
    return "\n".join([head] + rows)


# ------------------------------------------------------------------------------------------------ the picture

def fit_png(points: list[dict], fit: dict, held_out: list[dict] = ()) -> bytes:
    """Measured latencies against size (log-log), the fitted line through them, and points held out of the fit
    drawn apart: PNG bytes. matplotlib's Figure, not pyplot, so a notebook's backend is left alone."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.6))
    ax = fig.add_subplot()
    xs = [p["size_bytes"] for p in points]
    ax.plot(xs, [p["lat_median_s"] for p in points], "o", label="measured (fitted)")
    if held_out:
        ax.plot([p["size_bytes"] for p in held_out], [p["lat_median_s"] for p in held_out], "s", color="tab:red",
                label="measured (held out)")
    hi = max(xs + [p["size_bytes"] for p in held_out])
    grid = [min(xs) * (hi / min(xs)) ** (i / 60) for i in range(61)]
    ax.plot(grid, [fit["alpha_s"] + s / (fit["beta_GBps"] * 1e9) for s in grid], "-", color="tab:grey",
            label=f"alpha + size/beta: {fmt_s(fit['alpha_s'])} + size/{fit['beta_GBps']:.3g} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("time per call (s)")
    ax.set_title(f"{fit['op']} on {fit['n']} ranks")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return buf.getvalue()
