"""`python -m sandbox.bench`: a tiny sweep's JSON, nccl-tests' bus-bandwidth factors, and bad input; with
`--nnodes`, a small run on simulated nodes (root only: skipped with the reason elsewhere), its tables, and the
check that the hierarchical all_reduce equals the flat one, shown able to fail."""
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_cli
from sandbox import bench
from sandbox.bench import multinode


FIELDS = {"op", "n", "backend", "size_bytes", "iters", "lat_median_s", "lat_p10_s", "lat_p90_s", "lat_min_s",
          "lat_max_s", "algbw_GBps", "busbw_factor", "busbw_GBps"}


@pytest.mark.parametrize("n", [2, 4, 8])
def test_factors_are_nccl_tests(n):
    # PERFORMANCE.md of nccl-tests; gather uses scatter's (n-1)/n, as the module docstring says
    expected = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
                "all_to_all": (n - 1) / n, "broadcast": 1, "reduce": 1, "send_recv": 1, "gather": (n - 1) / n,
                "barrier": None}
    assert set(expected) == set(bench.OPS)
    for op, f in expected.items():
        assert bench.bus_factor(op, n) == f, op


def test_sizes_follow_nccl_tests():
    assert bench.real_size("all_reduce", 64 * 1024, 4) == 64 * 1024
    assert bench.real_size("all_gather", 4, 4) == 16       # one float per rank's chunk at least
    assert bench.real_size("all_to_all", 100, 4) == 96     # rounded down to whole chunks
    assert bench.real_size("barrier", 1024, 2) == 0


def test_tiny_sweep(clean):
    p = run_cli("sandbox.bench", "-n", "2", "--ops", "all_reduce,all_gather,broadcast,send_recv,barrier",
                "--sizes", "4,64K", "--iters", "3", "--json", timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["failures"] == [] and doc["unsupported"] == {}
    points = doc["points"]
    got = {(q["op"], q["size_bytes"]) for q in points}
    want = {(op, s) for op in ("all_reduce", "all_gather", "broadcast", "send_recv") for s in (4 if op != "all_gather"
            else 8, 64 * 1024)} | {("barrier", 0)}
    assert got == want
    for q in points:
        assert FIELDS <= set(q), q
        assert q["n"] == 2 and q["iters"] == 3 and q["backend"] == "gloo"
        lat = [q[k] for k in ("lat_min_s", "lat_p10_s", "lat_median_s", "lat_p90_s", "lat_max_s")]
        assert all(math.isfinite(x) and x > 0 for x in lat), q
        assert lat == sorted(lat), q
        if q["op"] == "barrier":
            assert q["algbw_GBps"] is None and q["busbw_GBps"] is None
            continue
        for k in ("algbw_GBps", "busbw_GBps"):
            assert math.isfinite(q[k]) and q[k] > 0, q
        assert q["algbw_GBps"] == q["size_bytes"] / q["lat_median_s"] / 1e9
        assert q["busbw_GBps"] / q["algbw_GBps"] == pytest.approx(bench.bus_factor(q["op"], 2), rel=1e-12)
    assert math.isfinite(doc["memcpy_GBps"]["2"]) and doc["memcpy_GBps"]["2"] > 0
    assert {f["op"] for f in doc["alpha_beta"]} == {"all_reduce", "all_gather", "broadcast", "send_recv"}
    assert "bench: all_reduce n=2" in p.stderr  # the progress lines


@pytest.mark.parametrize("args, words", [
    (["-n", "1"], "no one to talk to"),
    (["-n", "two"], "not a whole number"),
    (["--ops", "allreduce,scan"], "'scan' is not one of"),
    (["--sizes", "4,1X"], "not a size"),
    (["--sizes", "2"], "less than one float32"),
    (["--iters", "0"], "at least 1"),
    (["--nnodes", "1"], "1 node has no link between nodes to measure"),
    (["--nnodes", "2", "--nproc-per-node", "1"], "1 rank per node leaves no group inside a node"),
    (["--nnodes", "2", "-n", "4"], "with --nnodes give --nproc-per-node instead"),
    (["--nnodes", "2", "--cap", "fast"], "a link rate is a number and a unit"),
    (["--cap", "1gbit"], "give --nnodes too"),
    (["--nnodes", "2", "--advice", "--gpu"], "--advice and --gpu are for the one-node sweep"),
])
def test_bad_input_is_one_sentence(args, words):
    p = run_cli("sandbox.bench", *args, timeout=30)
    assert p.returncode == 2
    assert words in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def _fake_points(n):
    pts = []
    for op in bench.OPS:
        for size in ((0,) if op == "barrier" else (4, 64 * 1024)):
            t = 1e-4 + size * 1e-9
            pts.append(bench.point(op, n, bench.real_size(op, size, n) if size else 0, [t, 2 * t, 3 * t], "gloo"))
    return pts


def test_table_and_plots_from_points(tmp_path):
    pts = _fake_points(2) + _fake_points(4)
    text = bench.table(pts, {2: 30.0, 4: 28.0})
    assert len(text.splitlines()) == 2 + len(pts)
    assert "all_reduce" in text and "64 KiB" in text
    written = bench.plot(pts, {2: 30.0, 4: 28.0}, str(tmp_path))
    assert sorted(p.rsplit("/", 1)[1] for p in written) == ["busbw-n2.png", "busbw-n4.png", "latency-n2.png",
                                                             "latency-n4.png"]
    for p in written:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_advice_lines_are_ratios():
    m = {"small_each": 8e-3, "small_flat": 1e-3, "compute_only": 1e-3, "blocking": 3e-3, "overlapped": 2e-3,
         "sync_every_1": 8e-3, "sync_every_4": 4e-3}
    for size in bench.KV_SIZES:
        m |= {f"kv_pairwise_{size}": 3e-3, f"kv_ring_{size}": 2e-3, f"kv_batch_isend_irecv_{size}": 1e-3}
    text = "\n".join(bench.advice_lines({3: m}))
    assert "batching is 8x faster" in text and "blocking/overlapped 1.5x" in text
    assert "pairwise/ring 1.5, pairwise/batch 3" in text


def test_advice_run(clean):
    p = run_cli("sandbox.bench", "-n", "2", "--ops", "barrier", "--iters", "1", "--advice", "--json", timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    adv = json.loads(p.stdout)["advice_s"]
    assert sorted(adv) == ["3", "4"]
    for m in adv.values():
        assert {"small_each", "small_flat", "blocking", "overlapped", "sync_every_1", "sync_every_4"} <= set(m)
        assert {f"kv_{k}_{s}" for k in ("pairwise", "ring", "batch_isend_irecv") for s in bench.KV_SIZES} <= set(m)
        assert all(math.isfinite(v) and v > 0 for v in m.values()), m


def test_alpha_beta_recovers_a_model():
    pts = [bench.point("all_reduce", 2, s, [50e-6 + s / 2e9], "gloo") for s in (4, 65536, 4 << 20, 64 << 20)]
    (f,) = bench.alpha_beta(pts)
    assert f["alpha_s"] == pytest.approx(50e-6, rel=1e-6)
    assert f["beta_GBps"] == pytest.approx(2.0, rel=1e-6)
    assert f["rms_rel_residual"] < 1e-9
    assert "all_reduce" in bench.fit_table([f])


# ------------------------------------------------------------------------------------------------ --nnodes

def test_spread_groups_cross_every_node():
    assert multinode.spread(2, 2) == [0, 2]
    assert multinode.spread(2, 4) == [0, 4, 1, 5]  # 4 ranks over 2 nodes: two on each
    assert multinode.spread(3, 2) == [0, 2]
    assert multinode.cap_GBps("1gbit") == 0.125 and multinode.cap_GBps("100mbit") == 0.0125
    assert multinode.cap_GBps(None) is None


def _fake_nodes(cap):
    def pt(n, t, size):
        return bench.point("all_reduce", n, size, [t], "gloo")
    size = 1 << 20
    return {"nnodes": 2, "nproc_per_node": 2, "cap": cap, "cap_GBps": multinode.cap_GBps(cap),
            "links": [{"size_bytes": size, "intra": {**pt(2, 1e-3, size), "ranks": [0, 1]},
                       "inter": {**pt(2, 8e-3, size), "ranks": [0, 2]}}],
            "hierarchical": [{"size_bytes": size, "flat": pt(4, 10e-3, size), "hierarchical": pt(4, 6e-3, size),
                              "max_abs_diff": 4.8e-7}]}


def test_node_tables_are_ratios_against_the_same_run():
    text = "\n".join(multinode.lines(_fake_nodes("1gbit")))
    head = text.splitlines()[0]
    # 1 MiB in 8 ms: 0.131 GB/s, 0.125x the 1 ms of the group inside a node, 105% of a 1gbit link
    assert head.startswith("2 nodes x 2 ranks, each node's link capped at 1gbit (0.125 GB/s each way): at 1 MiB"), head
    assert "reaches 0.125x the bus bandwidth of one inside a node (0.131 GB/s, 105% of the cap)" in head, head
    assert "the hierarchical all_reduce takes 0.6x the flat one's time" in head, head
    assert "inside node0 (ranks 0, 1) vs across nodes (ranks 0, 2)" in text
    assert "0.125x" in text and "0.6x" in text and "4.8e-07" in text
    uncapped = "\n".join(multinode.lines(_fake_nodes(None)))
    assert "links uncapped" in uncapped and "of the cap" not in uncapped.splitlines()[0]


def _wrong_hierarchical():
    """A "hierarchical" all_reduce that forgets every step: the check must say so on the rank."""
    import torch.distributed as dist

    multinode.check_equal(lambda buf: None, 64, dist.get_rank(), dist.get_world_size())


def test_the_equality_check_can_fail(clean):
    from sandbox import launch

    res = launch(_wrong_hierarchical, world_size=2, init=True, timeout=120)
    assert res.verdict == "error", res.diagnosis.summary
    assert "the hierarchical all_reduce differs from the flat one on rank" in res.text(logs=True)


def test_two_nodes_capped(two_nodes):
    cap = "50mbit"  # 6.25 MB/s: a 1 MiB all_reduce across nodes takes about 170 ms, inside a node a few
    p = run_cli("sandbox.bench", "--nnodes", "2", "--nproc-per-node", "2", "--cap", cap, "--sizes", "64K,1M",
                "--iters", "3", "--warmup", "1", "--json", timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    d = json.loads(p.stdout)
    assert (d["nnodes"], d["nproc_per_node"], d["cap"], d["failures"]) == (2, 2, cap, [])
    assert [x["size_bytes"] for x in d["links"]] == [x["size_bytes"] for x in d["hierarchical"]] == [65536, 1 << 20]
    for x in d["links"]:
        assert (x["intra"]["ranks"], x["inter"]["ranks"]) == ([0, 1], [0, 2])
        for q in (x["intra"], x["inter"]):
            assert FIELDS <= set(q) and q["n"] == 2 and q["iters"] == 3
            assert q["busbw_GBps"] == pytest.approx(q["algbw_GBps"])  # nccl-tests' 2(n-1)/n is 1 for 2 ranks
    for x in d["hierarchical"]:
        assert x["flat"]["n"] == x["hierarchical"]["n"] == 4
        assert x["flat"]["busbw_factor"] == 1.5
        assert 0 <= x["max_abs_diff"] < 1e-4  # the ranks checked it; a wrong algorithm is off by about 1
    big = d["links"][-1]
    # tbf holds the link to the cap (a 64 KiB bucket at most passes faster); the path inside a node is not capped
    assert big["inter"]["busbw_GBps"] <= 1.5 * d["cap_GBps"], big
    assert big["intra"]["busbw_GBps"] > big["inter"]["busbw_GBps"], big
    assert "bench: 1 MiB: intra" in p.stderr  # the progress lines


def test_nodes_without_privileges_is_one_sentence_and_exit_2():
    code = ("import os, sys; os.geteuid = lambda: 1000\nfrom sandbox.bench.__main__ import main\n"
            "sys.exit(main(['--nnodes', '2', '--nproc-per-node', '2', '--cap', '1gbit']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == ["sandbox.bench: simulated nodes need root (network namespaces and a "
                                             "bridge): run as root, e.g. in a container."], p.stderr
    assert p.stdout == ""
