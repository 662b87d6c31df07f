"""`python -m sandbox.bench`: the command line (see the package's docstring for what is measured, and how)."""
from __future__ import annotations

import json
import sys
import threading
import time

from sandbox import bench, cli, defaults
from sandbox.bench.advice import advice, advice_lines
from sandbox.bench.multinode import NODE_SIZES, QUICK_NODE_SIZES
from sandbox.bench.stats import (ALIASES, DEFAULT_SIZES_CPU, DEFAULT_SIZES_GPU, GIB, KIB, MEMCPY_BYTES, MIB, OPS,
                                 QUICK_SIZES, alpha_beta, fit_table, fmt_size, table)

PROG = "python -m sandbox.bench"


def _sizes(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        s = part.strip().upper().removesuffix("IB").removesuffix("B")
        mult = {"K": KIB, "M": MIB, "G": GIB}.get(s[-1:], 1)
        num = s[:-1] if mult > 1 else s
        try:
            v = int(num) * mult
        except ValueError:
            raise cli.argparse.ArgumentTypeError(f"{part.strip()!r} is not a size (bytes, or with K, M, G)") from None
        if v < 4:
            raise cli.argparse.ArgumentTypeError(f"{part.strip()} is less than one float32 (4 bytes)")
        out.append(v)
    return sorted(set(out))


def _ops(text: str) -> list[str]:
    if text.strip() == "all":
        return list(OPS)
    out = []
    for part in text.split(","):
        name = ALIASES.get(part.strip().lower(), part.strip().lower())
        if name not in OPS:
            raise cli.argparse.ArgumentTypeError(f"{part.strip()!r} is not one of {', '.join(OPS)}")
        if name not in out:
            out.append(name)
    return out


def _world_sizes(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        v = cli.positive_int(part.strip())
        if v < 2:
            raise cli.argparse.ArgumentTypeError(f"{v} rank has no one to talk to: give 2 or more")
        out.append(v)
    return sorted(set(out))


def _nnodes(text: str) -> int:
    v = cli.positive_int(text)
    if v < 2:
        raise cli.argparse.ArgumentTypeError("1 node has no link between nodes to measure: give 2 or more")
    return v


def _per_node(text: str) -> int:
    v = cli.positive_int(text)
    if v < 2:
        raise cli.argparse.ArgumentTypeError("1 rank per node leaves no group inside a node to compare with: give 2"
                                             " or more")
    return v


def _cap(text: str) -> str:
    from sandbox import nodes  # torch-free: the rate is checked as the nodes will read it

    try:
        nodes.tbf_args(text)
    except ValueError as e:
        raise cli.argparse.ArgumentTypeError(str(e).rstrip(".")) from None
    return text.strip().lower()


def _check_nodes(p, a) -> None:
    """--nnodes is its own measurement: the one-node sweep's options do not apply to it, nor its options without it."""
    if a.nnodes is None:
        if a.nproc_per_node is not None or a.cap is not None:
            p.error("--nproc-per-node and --cap measure several simulated nodes: give --nnodes too")
        return
    if a.n is not None:
        p.error("-n is the world sizes of the one-node sweep: with --nnodes give --nproc-per-node instead")
    other = [flag for flag, v in (("--ops", a.ops), ("--advice", a.advice), ("--plot", a.plot), ("--gpu", a.gpu)) if v]
    if other:
        named = other[0] if len(other) == 1 else f"{', '.join(other[:-1])} and {other[-1]}"
        p.error(f"{named} {'is' if len(other) == 1 else 'are'} for the one-node sweep: --nnodes measures all_reduce"
                f" inside and across nodes")


def parse(argv=None):
    p = cli.Parser(prog=PROG, description=bench.__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a short sweep: n=2,4; 4 B, 64 KiB, 4 MiB, 64 MiB; 5 iters")
    p.add_argument("-n", type=_world_sizes, help="world sizes, e.g. 2,4,8 (default 2,4,8; --gpu: 2)")
    p.add_argument("--ops", type=_ops, help=f"ops, comma-separated, or all (default): {', '.join(OPS)}")
    p.add_argument("--sizes", type=_sizes, help="message sizes in bytes, K/M/G = KiB/MiB/GiB, e.g. 4,1K,1M,64M")
    p.add_argument("--iters", type=cli.positive_int, help="timed iterations per point (default 20; --quick 5)")
    p.add_argument("--warmup", type=int, default=None, help="untimed iterations first (default 3; --quick 2)")
    p.add_argument("--json", action="store_true", help="print every point's fields as JSON on stdout")
    p.add_argument("--gpu", action="store_true", help="NCCL, one GPU per rank")
    p.add_argument("--advice", action="store_true",
                   help="also measure the document's advice (batching, overlap, sync every k) and the kv-sync"
                        " exchange (pairwise, ring, batch_isend_irecv) on 3 and 4 ranks, as ratios")
    p.add_argument("--plot", metavar="DIR", help="write latency and bus-bandwidth PNGs there")
    p.add_argument("--nnodes", type=_nnodes, metavar="K",
                   help="measure on K simulated nodes instead (needs root): all_reduce inside a node vs across nodes,"
                        " and hierarchical vs flat, as ratios (sizes 64 KiB .. 64 MiB; --quick up to 16 MiB)")
    p.add_argument("--nproc-per-node", type=_per_node, metavar="P",
                   help="ranks on each node, with --nnodes (default 2: with one there is no group inside a node)")
    p.add_argument("--cap", type=_cap, metavar="RATE",
                   help="with --nnodes: every node's link capped to RATE both ways (tc tbf), e.g. 1gbit, 100mbit;"
                        " default no cap (loopback speed)")
    p.add_argument("--timeout", type=cli.positive_seconds, default=900.0, help="limit per world size, s (900)")
    a = p.parse_args(argv)
    if a.warmup is not None and a.warmup < 0:
        p.error(f"--warmup {a.warmup} must be 0 or more")
    _check_nodes(p, a)
    a.nproc_per_node = a.nproc_per_node or 2
    a.n = a.n or ([2, 4] if a.quick else [2] if a.gpu else [2, 4, 8])
    a.ops = a.ops or list(OPS)
    a.sizes = a.sizes or list((QUICK_NODE_SIZES if a.quick else NODE_SIZES) if a.nnodes else
                              QUICK_SIZES if a.quick else DEFAULT_SIZES_GPU if a.gpu else DEFAULT_SIZES_CPU)
    a.iters = a.iters or (5 if a.quick else 20)
    a.warmup = a.warmup if a.warmup is not None else (2 if a.quick else 3)
    return a


class _Sweep:
    """What the launches of one sweep brought back, gathered over its world sizes."""

    def __init__(self):
        self.points, self.memcpy, self.unsupported, self.failures, self.threads = [], {}, {}, [], None
        self.advice: dict = {}
        self.nodes: dict | None = None  # --nnodes: rank 0's figures (sandbox.bench.multinode)

    def add(self, n: int, res) -> None:
        if not res.ok or not res.values or not res.values[0]:
            self.failures.append(f"n={n}: {res.verdict}: {res.diagnosis.summary}")
            return
        got = res.values[0]
        self.points += got["points"]
        if "memcpy_GBps" in got:
            self.memcpy[n] = got["memcpy_GBps"]
            self.threads = got.get("threads")
        for op, why in got["unsupported"].items():
            self.unsupported[f"{op} (n={n})"] = why


def _echo():
    lock = threading.Lock()

    def echo(rank, line):
        with lock:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
    return echo


def _measure(a, s: _Sweep) -> None:
    """One launch per world size (and the advice's), rank 0's progress lines echoed as they come."""
    from sandbox.bench.sweep import rank_sweep
    from sandbox.launcher import launch

    echo = _echo()
    if a.nnodes:
        from sandbox.bench.multinode import measure

        s.nodes, more = measure(nnodes=a.nnodes, per=a.nproc_per_node, cap=a.cap, sizes=a.sizes, iters=a.iters,
                                warmup=a.warmup, timeout=a.timeout, on_output=echo)
        s.failures += more
        return
    for n in a.n:
        s.add(n, launch(rank_sweep, world_size=n, args=(a.ops, a.sizes, a.iters, a.warmup, a.gpu), init=True,
                        gpu=a.gpu, timeout=a.timeout, hang_after=max(60.0, a.timeout / 2), on_output=echo))
    s.points.sort(key=lambda p: (OPS.index(p["op"]), p["n"], p["size_bytes"]))
    if a.advice:
        s.advice, more = advice(a.iters, a.timeout)
        s.failures += more


def _print_json(a, s: _Sweep, wall: float) -> None:
    print(json.dumps({"points": s.points, "memcpy_GBps": {str(k): v for k, v in s.memcpy.items()},
                      "memcpy_bytes": MEMCPY_BYTES, "memcpy_threads": s.threads, "unsupported": s.unsupported,
                      "failures": s.failures,
                      "advice_s": {str(k): v for k, v in s.advice.items()}, "alpha_beta": alpha_beta(s.points),
                      "wall_s": wall, "gpu": a.gpu}, indent=1))


def _print_nodes(a, s: _Sweep, wall: float) -> None:
    from sandbox.bench.multinode import lines

    if a.json:
        print(json.dumps({**(s.nodes or {}), "failures": s.failures, "wall_s": wall, "iters": a.iters,
                          "warmup": a.warmup}, indent=1))
        return
    if s.nodes:
        print("\n".join(lines(s.nodes)))
        print()
    print(f"median of {a.iters} iterations after {a.warmup} warm-up, slowest rank per iteration;"
          f" {wall:.0f} s in all")


def _print_text(a, s: _Sweep, wall: float) -> None:
    if s.points:
        print(table(s.points, s.memcpy))
    lim = ", ".join(f"{v:.3g} GB/s (n={k} run)" for k, v in s.memcpy.items())
    if lim:
        print(f"\nlimit: {'device' if a.gpu else 'memory'} copy of {fmt_size(MEMCPY_BYTES)} by rank 0"
              f"{'' if a.gpu else f' ({s.threads} torch thread(s))'}, read + write counted: {lim}")
    for what, why in s.unsupported.items():
        print(f"not measured: {what}: {why}")
    fits = alpha_beta(s.points)
    if fits:
        print("\nalpha-beta model, latency = alpha + size / beta (fitted on relative error; RMS residual):")
        print(fit_table(fits))
        print()
    for line in advice_lines(s.advice):
        print(line)
    print(f"median of {a.iters} iterations after {a.warmup} warm-up, slowest rank per iteration;"
          f" {wall:.0f} s in all")


def main(argv=None) -> int:
    a = parse(argv)
    from sandbox.launcher import Interrupted, UsageError

    t0 = time.perf_counter()
    s = _Sweep()
    try:
        _measure(a, s)
    except UsageError as e:
        cli.say(PROG, " ".join(str(e).split()))  # one line, even where the sentence quotes a command's own output
        return 2
    except Interrupted as e:
        cli.say(PROG, "interrupted.")
        return defaults.interrupted_exit(e.signal)
    wall = time.perf_counter() - t0
    (_print_nodes if a.nnodes else _print_json if a.json else _print_text)(a, s, wall)
    if a.plot and s.points:
        from sandbox.bench.plot import plot

        try:
            for path in plot(s.points, s.memcpy, a.plot, a.gpu):
                print(f"plot: {path}", file=sys.stderr)
        except OSError as e:
            cli.say(PROG, f"no plots: {e}")
            s.failures.append(f"plots: {e}")
    for f in s.failures:
        cli.say(PROG, f"failed: {f}")
    return 1 if s.failures else 0


if __name__ == "__main__":
    sys.exit(cli.guarded(main, "sandbox.bench"))
