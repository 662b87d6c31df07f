"""Several simulated nodes, measured (`python -m sandbox.bench --nnodes 2 --nproc-per-node 2 --cap 1gbit`): an
all_reduce inside a node against one across nodes, and the advice people follow on clusters (a hierarchical
all_reduce) against a flat one. On a cluster the link between nodes is the slow one (a NIC against NVLink or shared
memory); here the nodes are `sandbox.nodes`'s network namespaces on one bridge, and `--cap` makes their links slow
(tc's tbf on both ends of every node's link, both ways). Two ranks of one node talk through that node's own
loopback, never its link; ranks of two nodes cross both nodes' links. Without a cap the links are veths, as fast as
the loopback, and the two figures come out close.

One launch of K x P ranks, real gloo, untraced (inside `trace.paused()`, as the sweep: `sandbox.bench.sweep`):
- intra vs inter: an all_reduce in a group of P ranks on node0 (intra) and in a group of P ranks spread over the
  nodes (inter: local rank 0 of every node, then local rank 1, ...), one group at a time while the other ranks wait;
  bus bandwidth with nccl-tests' factor for P ranks, 2(P-1)/P. Read inter/intra, and with a cap inter against the
  cap: a ring of one rank per node moves its bus bandwidth over every link, so that figure tends to the cap.
- hierarchical vs flat, on all K x P ranks: reduce inside each node to its local rank 0, all_reduce across those
  K ranks, broadcast inside each node; against one all_reduce on every rank. Read hierarchical/flat time: below 1
  where the link is the bottleneck (each node's link then carries the data of one rank, not of a ring through all).
  Before timing, every rank checks the hierarchical result equals the flat one (torch.testing.assert_close) on
  random data; a difference fails the run.
Each iteration times the compared calls back to back (a barrier before each), so a change in the machine's speed
hits both alike; each time is the slowest rank's, the figure the median.
"""
from __future__ import annotations

import os
import time
from typing import Callable

from sandbox import nodes
from sandbox.bench.stats import KIB, MIB, bus_factor, columns, fmt_bw, fmt_size, fmt_time, point

NODE_SIZES = (64 * KIB, MIB, 16 * MIB, 64 * MIB)
QUICK_NODE_SIZES = (64 * KIB, MIB, 16 * MIB)


def cap_GBps(rate: str | None) -> float | None:
    """A link rate in tc's words ("1gbit") as GB/s (1e9 bytes/s), the unit of bus bandwidth; None for no cap."""
    return None if rate is None else nodes.rate_bytes_per_s(rate) / 1e9


def spread(nnodes: int, per: int) -> list[int]:
    """P ranks over as many nodes as there are: local rank 0 of every node, then local rank 1, ..., the first P."""
    return [node * per + local for local in range(per) for node in range(nnodes)][:per]


# ------------------------------------------------------------------------------------------------ in the ranks

def _alternating(calls: dict[str, Callable | None], warmup: int, iters: int) -> dict[str, list[float]]:
    """Each iteration times every call in turn, a barrier on all ranks before each (a rank outside a call's group
    has None and just waits); the times are the slowest rank's."""
    import torch
    import torch.distributed as dist

    times = {name: [] for name in calls}
    for i in range(warmup + iters):
        for name, call in calls.items():
            dist.barrier()
            t0 = time.perf_counter()
            if call is not None:
                call()
            if i >= warmup:
                times[name].append(time.perf_counter() - t0)
    t = torch.tensor([times[name] for name in calls], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # a call lasts as long as its slowest rank
    return dict(zip(calls, t.tolist()))


def check_equal(hierarchical: Callable, numel: int, me: int, n: int) -> float:
    """The hierarchical all_reduce of random data equals the flat one on this rank (AssertionError if not); returns
    the largest difference over all ranks."""
    import torch
    import torch.distributed as dist

    x = torch.randn(numel, generator=torch.Generator().manual_seed(1000 + me))
    flat, hier = x.clone(), x.clone()
    dist.all_reduce(flat)
    hierarchical(hier)
    # n float32 sums added in another order: each may round by an ulp of a partial sum (a few units of 1e-6 for
    # these values); a wrong algorithm is off by about 1
    torch.testing.assert_close(hier, flat, rtol=1e-5, atol=1e-5 * n,
                               msg=lambda m: f"the hierarchical all_reduce differs from the flat one on rank {me}: {m}")
    d = torch.tensor([(hier - flat).abs().max().item()], dtype=torch.float64)
    dist.all_reduce(d, op=dist.ReduceOp.MAX)
    return d.item()


def rank_nodes(sizes: list[int], iters: int, warmup: int) -> dict | None:
    """On every rank of a K x P run (the process group is up), untraced: rank 0 returns the points, the others None."""
    import torch
    import torch.distributed as dist

    from sandbox import trace

    me, n = dist.get_rank(), dist.get_world_size()
    per, node = int(os.environ["LOCAL_WORLD_SIZE"]), int(os.environ["NODE_RANK"])
    nnodes = n // per
    out = {"nnodes": nnodes, "nproc_per_node": per, "links": [], "hierarchical": []}
    with trace.paused():
        # every rank makes every group, in the same order (new_group is collective over the world)
        nodes = [dist.new_group(list(range(k * per, (k + 1) * per))) for k in range(nnodes)]
        leaders = dist.new_group([k * per for k in range(nnodes)])
        inter_ranks = spread(nnodes, per)
        inter = dist.new_group(inter_ranks)
        leader = node * per

        def hierarchical(buf):
            dist.reduce(buf, dst=leader, group=nodes[node])  # global ranks, as torch.distributed takes them
            if me == leader:
                dist.all_reduce(buf, group=leaders)
            dist.broadcast(buf, src=leader, group=nodes[node])

        for size in sizes:
            numel = max(1, size // 4)
            size = numel * 4
            diff = check_equal(hierarchical, numel, me, n)
            buf = torch.zeros(numel)  # zeros: summed over and over, they stay finite
            t = _alternating({"intra": (lambda: dist.all_reduce(buf, group=nodes[0])) if node == 0 else None,
                              "inter": (lambda: dist.all_reduce(buf, group=inter)) if me in inter_ranks else None,
                              "flat": lambda: dist.all_reduce(buf),
                              "hierarchical": lambda: hierarchical(buf)}, warmup, iters)
            if me != 0:
                continue
            pts = {k: point("all_reduce", per if k in ("intra", "inter") else n, size, v, "gloo") for k, v in t.items()}
            pts["intra"]["ranks"], pts["inter"]["ranks"] = list(range(per)), inter_ranks
            out["links"].append({"size_bytes": size, "intra": pts["intra"], "inter": pts["inter"]})
            out["hierarchical"].append({"size_bytes": size, "flat": pts["flat"], "hierarchical": pts["hierarchical"],
                                        "max_abs_diff": diff})
            print(f"bench: {fmt_size(size)}: intra {fmt_time(pts['intra']['lat_median_s'])}, inter"
                  f" {fmt_time(pts['inter']['lat_median_s'])}, flat {fmt_time(pts['flat']['lat_median_s'])},"
                  f" hierarchical {fmt_time(pts['hierarchical']['lat_median_s'])}", flush=True)
        dist.barrier()
    return out if me == 0 else None


# ------------------------------------------------------------------------------------------------ in the parent

def measure(*, nnodes: int, per: int, cap: str | None, sizes: list[int], iters: int, warmup: int, timeout: float,
            on_output=None) -> tuple[dict | None, list[str]]:
    """One launch on K simulated nodes of P ranks: (rank 0's figures, failures). Raises the launcher's UsageError
    (one sentence) where nodes cannot be made here."""
    from sandbox.launcher import launch

    res = launch(rank_nodes, world_size=nnodes * per, args=(list(sizes), iters, warmup), init=True, nnodes=nnodes,
                 node_options={"cap": cap} if cap else None, timeout=timeout, hang_after=max(60.0, timeout / 2),
                 on_output=on_output)
    if res.ok and res.values and res.values[0]:
        got = res.values[0]
        got["cap"], got["cap_GBps"] = cap, cap_GBps(cap)
        return got, []
    return None, [f"{nnodes} nodes x {per}: {res.verdict}: {res.diagnosis.summary}"]


def _ratio(x: float | None, y: float | None) -> str:
    return "-" if not x or not y else f"{x / y:.3g}x"


def _pct(x: float | None, y: float | None) -> str:
    return "-" if not x or not y else f"{100 * x / y:.2g}%" if x < 0.1 * y else f"{100 * x / y:.0f}%"


def headline(got: dict) -> str:
    """One line first: the largest size's inter/intra and hierarchical/flat."""
    k, p, lim = got["nnodes"], got["nproc_per_node"], got.get("cap_GBps")
    link = (f"each node's link capped at {got['cap']} ({lim:.3g} GB/s each way)" if lim
            else "links uncapped (veths, loopback speed)")
    if not got["links"]:
        return f"{k} nodes x {p} ranks, {link}: nothing measured"
    lk, hr = got["links"][-1], got["hierarchical"][-1]
    inter = lk["inter"]["busbw_GBps"]
    of_cap = f", {_pct(inter, lim)} of the cap" if lim else ""
    return (f"{k} nodes x {p} ranks, {link}: at {fmt_size(lk['size_bytes'])} an all_reduce across nodes reaches"
            f" {_ratio(inter, lk['intra']['busbw_GBps'])} the bus bandwidth of one inside a node"
            f" ({fmt_bw(inter)} GB/s{of_cap}); the hierarchical all_reduce takes"
            f" {_ratio(hr['hierarchical']['lat_median_s'], hr['flat']['lat_median_s'])} the flat one's time.")


def lines(got: dict) -> list[str]:
    """The headline, then the two tables."""
    k, p, lim = got["nnodes"], got["nproc_per_node"], got.get("cap_GBps")
    out = [headline(got), ""]
    if not got["links"]:
        return out
    intra_r, inter_r = got["links"][0]["intra"]["ranks"], got["links"][0]["inter"]["ranks"]
    out.append(f"all_reduce in a group of {p} ranks: inside node0 (ranks {', '.join(map(str, intra_r))}) vs across"
               f" nodes (ranks {', '.join(map(str, inter_r))}); busbw factor {bus_factor('all_reduce', p):.3g}")
    head = ("size", "intra latency", "intra busbw GB/s", "inter latency", "inter busbw GB/s", "inter/intra busbw",
            "inter of cap")
    rows = [(fmt_size(x["size_bytes"]), fmt_time(x["intra"]["lat_median_s"]), fmt_bw(x["intra"]["busbw_GBps"]),
             fmt_time(x["inter"]["lat_median_s"]), fmt_bw(x["inter"]["busbw_GBps"]),
             _ratio(x["inter"]["busbw_GBps"], x["intra"]["busbw_GBps"]),
             _pct(x["inter"]["busbw_GBps"], lim)) for x in got["links"]]
    out += [columns(head, rows, right=set(range(7))), ""]
    out.append(f"all_reduce on all {k * p} ranks: flat vs hierarchical (reduce to each node's local rank 0,"
               f" all_reduce across the {k} nodes, broadcast inside each)")
    head = ("size", "flat latency", "flat busbw GB/s", "hierarchical latency", "hierarchical/flat time",
            "max |hier - flat|")
    rows = [(fmt_size(x["size_bytes"]), fmt_time(x["flat"]["lat_median_s"]), fmt_bw(x["flat"]["busbw_GBps"]),
             fmt_time(x["hierarchical"]["lat_median_s"]),
             _ratio(x["hierarchical"]["lat_median_s"], x["flat"]["lat_median_s"]), f"{x['max_abs_diff']:.2g}")
            for x in got["hierarchical"]]
    out += [columns(head, rows, right=set(range(6)))]
    return out


__all__ = ["NODE_SIZES", "QUICK_NODE_SIZES", "cap_GBps", "check_equal", "headline", "lines", "measure", "rank_nodes",
           "spread"]
