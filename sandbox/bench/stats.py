"""The bench's arithmetic and wording, torch-free: the ops, nccl-tests' sizes and bus-bandwidth factors, one point's
statistics, the alpha-beta fit, and the tables. The definitions are in the package's docstring."""
from __future__ import annotations

import math
import statistics

OPS = ("barrier", "broadcast", "reduce", "all_reduce", "gather", "all_gather", "reduce_scatter", "all_to_all",
       "send_recv")
ALIASES = {"send/recv": "send_recv", "sendrecv": "send_recv", "alltoall": "all_to_all", "allreduce": "all_reduce",
           "allgather": "all_gather", "reducescatter": "reduce_scatter"}
CHUNKED = {"gather", "all_gather", "reduce_scatter", "all_to_all"}  # size = n chunks of size/n

# nccl-tests' bus-bandwidth factor per op, as a function of the world size n (None: latency only)
FACTORS = {
    "barrier": None,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "gather": lambda n: (n - 1) / n,          # not in nccl-tests: the factor of its mirror, scatter
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
DEFAULT_SIZES_CPU = (4, 256, 4 * KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB)
DEFAULT_SIZES_GPU = (4, 4 * KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB, GIB)
QUICK_SIZES = (4, 64 * KIB, 4 * MIB, 64 * MIB)
MEMCPY_BYTES = 64 * MIB


def bus_factor(op: str, n: int) -> float | None:
    f = FACTORS[op]
    return None if f is None else f(n)


def real_size(op: str, size: int, n: int) -> int:
    """The bytes a point really moves by nccl-tests' definition, `size` rounded down to whole float32 chunks."""
    if op == "barrier":
        return 0
    if op in CHUNKED:
        return max(1, size // (4 * n)) * 4 * n
    return max(1, size // 4) * 4


def point(op: str, n: int, size: int, times: list[float], backend: str) -> dict:
    """One point's fields from its K times (each the slowest rank's): latency spread, algbw and busbw."""
    med = statistics.median(times)
    if len(times) >= 2:
        q = statistics.quantiles(times, n=10, method="inclusive")
        p10, p90 = q[0], q[-1]
    else:
        p10 = p90 = times[0]
    f = bus_factor(op, n)
    algbw = size / med / 1e9 if f is not None else None
    return {"op": op, "n": n, "backend": backend, "size_bytes": size, "iters": len(times),
            "lat_median_s": med, "lat_p10_s": p10, "lat_p90_s": p90, "lat_min_s": min(times),
            "lat_max_s": max(times), "algbw_GBps": algbw, "busbw_factor": f,
            "busbw_GBps": None if f is None else algbw * f}


# ------------------------------------------------------------------------------------------------ wording

def fmt_size(b: int) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if b >= scale and b % scale == 0:
            return f"{b // scale} {unit}"
    return f"{b} B"


def fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.3g} us"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


def fmt_bw(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def columns(head: tuple, rows: list[tuple], right: set[int]) -> str:
    """Rows under a header and a rule, each column as wide as its widest cell; `right` columns right-aligned."""
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     .rstrip() for r in [head, tuple("-" * w for w in widths)] + rows)


def table(points: list[dict], memcpy: dict[int, float]) -> str:
    head = ("op", "n", "size", "latency", "p10-p90", "algbw GB/s", "busbw GB/s", "of memcpy")
    rows = []
    for p in points:
        lim = memcpy.get(p["n"])
        share = "-" if p["busbw_GBps"] is None or not lim else f"{100 * p['busbw_GBps'] / lim:.2g}%"
        share = "<0.01%" if share.endswith("%") and 100 * p["busbw_GBps"] / lim < 0.01 else share
        rows.append((p["op"], str(p["n"]), fmt_size(p["size_bytes"]) if p["op"] != "barrier" else "-",
                     fmt_time(p["lat_median_s"]), f"{fmt_time(p['lat_p10_s'])}-{fmt_time(p['lat_p90_s'])}",
                     fmt_bw(p["algbw_GBps"]), fmt_bw(p["busbw_GBps"]), share))
    return columns(head, rows, right={1, 2, 3, 5, 6, 7})


# ------------------------------------------------------------------------------------------------ the alpha-beta model

def alpha_beta(points: list[dict]) -> list[dict]:
    """latency = alpha + size / beta fitted per (op, n) by least squares on relative error (weights 1/t^2, so the
    4 B point counts as much as the 64 MiB one), with the RMS relative residual. beta is in algbw's units (GB/s)."""
    fits = []
    keys = sorted({(p["op"], p["n"]) for p in points if p["op"] != "barrier"}, key=lambda k: (OPS.index(k[0]), k[1]))
    for key in keys:
        pts = [(p["size_bytes"], p["lat_median_s"]) for p in points if (p["op"], p["n"]) == key]
        if len(pts) < 2:
            continue
        w = [1 / t ** 2 for _, t in pts]
        sw, sx, sy = sum(w), sum(wi * s for wi, (s, _) in zip(w, pts)), sum(wi * t for wi, (_, t) in zip(w, pts))
        sxx = sum(wi * s * s for wi, (s, _) in zip(w, pts))
        sxy = sum(wi * s * t for wi, (s, t) in zip(w, pts))
        det = sw * sxx - sx * sx
        if det <= 0:
            continue
        b = (sw * sxy - sx * sy) / det
        a = (sy - b * sx) / sw
        resid = math.sqrt(sum(((a + b * s) / t - 1) ** 2 for s, t in pts) / len(pts))
        fits.append({"op": key[0], "n": key[1], "alpha_s": a, "beta_GBps": 1 / b / 1e9 if b > 0 else None,
                     "rms_rel_residual": resid, "points": len(pts)})
    return fits


def fit_table(fits: list[dict]) -> str:
    head = ("op", "n", "alpha", "beta GB/s", "residual")
    rows = [(f["op"], str(f["n"]), fmt_time(f["alpha_s"]) if f["alpha_s"] > 0 else f"{f['alpha_s'] * 1e6:.3g} us",
             fmt_bw(f["beta_GBps"]), f"{100 * f['rms_rel_residual']:.2g}%") for f in fits]
    return columns(head, rows, right={1, 2, 3, 4})
