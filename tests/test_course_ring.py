"""Labs 20 and 21's code: the ring all-reduce check on real gloo ranks, and the cost model's arithmetic.

The check (`lab.check` with `ring.run_on_rank` and `ring.reference`) must accept the reference ring on 4 and on 3
ranks, with lengths that do not split evenly; name the deadlocking first attempt a point-to-point cycle; and reject
the plausible wrong rings with a wrong-value sentence that says which rank and where. The cost model must give
back the alpha and beta that made a set of points, through the bench's own fit, and its bucket plan must show the
trade-off the lab teaches (small buckets pay alpha, one bucket pays its whole time after backward).
"""
from __future__ import annotations

import re

import pytest

from sandbox import lab
from sandbox.bench.stats import alpha_beta, point
from sandbox.course import cost, ring


def _check(fn, n=4, **kw):
    return lab.check(ring.run_on_rank, n=n, args=(fn,), reference=ring.reference, show=False, **kw)


# ------------------------------------------------------------------------------------------------ on real ranks

def test_the_check_accepts_the_reference_ring_and_counts_its_sends(clean):
    c = _check(ring.ring_all_reduce)
    assert c.ok and c.verdict == "right", c.message
    # 2(N-1) sends a rank; 10 floats in chunks of 3, 3, 2, 2: each rank passes on all chunks but one per phase
    assert ring.traffic(c.result) == {0: {"sends": 6, "bytes": 60}, 1: {"sends": 6, "bytes": 64},
                                      2: {"sends": 6, "bytes": 60}, 3: {"sends": 6, "bytes": 56}}
    table = ring.traffic_table(c.result, sends=6, nbytes=60)
    assert "rank 3: 6 sends, 56 bytes   (you said 6 sends: right, 60 bytes: right)" in table, table
    assert "(you said 3 sends: wrong" in ring.traffic_table(c.result, sends=3)


def test_the_reference_ring_works_on_3_ranks_with_any_length(clean):
    for numel in (10, 2):  # 10 floats split 4, 3, 3; 2 floats leave rank 2's chunk empty
        c = lab.check(ring.run_on_rank, n=3, args=(ring.ring_all_reduce,), kwargs={"numel": numel},
                      reference=ring.reference, show=False)
        assert c.ok, (numel, c.message)
    assert ring.reference(3, numel=2) == [111.0, 222.0]


def test_the_first_attempt_deadlocks_and_is_named_a_p2p_cycle(clean):
    c = _check(ring.first_attempt)
    assert not c.ok and c.verdict == "hang", c.message
    assert c.result.diagnosis.kind == "p2p_cycle", c.result.diagnosis.summary
    assert sorted(c.result.diagnosis.culprit_ranks) == [0, 1, 2, 3]
    # the exercise's form of the same check: it asked for this hang, so it is what was asked
    assert lab.check(ring.run_on_rank, n=3, args=(ring.first_attempt,), reference=ring.reference,
                     expect="hang", kind="p2p_cycle", show=False).ok


def test_a_ring_without_its_all_gather_is_told_where_it_is_wrong(clean):
    c = _check(ring.without_all_gather)
    assert not c.ok and c.verdict == "wrong", c.message
    # rank 0 still holds its own chunk 0 (it passed it on and never got it back); only chunk 1 is the full sum
    assert re.match(r"Rank 0 returned a wrong value: \[0\] is 1\.0, the single-process reference has 1111\.0",
                    c.message), c.message
    assert c.result.values[0] == [1.0, 2.0, 3.0, 4444.0, 5555.0, 6666.0, 7707.0, 8808.0, 9009.0, 10010.0]


def test_an_all_gather_one_chunk_late_is_a_wrong_value(clean):
    c = _check(ring.off_by_one, n=3)
    assert not c.ok and c.verdict == "wrong", c.message
    assert re.match(r"Rank \d returned a wrong value: \[\d+\] is [\d.]+, the single-process reference has [\d.]+",
                    c.message), c.message


# ------------------------------------------------------------------------------------------------ the cost model

def _points(op, n, alpha, beta, sizes):
    """Bench points whose times are exactly the ring model's."""
    return [point(op, n, s, [cost.collective_s(op, s, n, alpha, beta)], "gloo") for s in sizes]


@pytest.mark.parametrize("op,n", [("all_reduce", 4), ("all_reduce", 3), ("send_recv", 4), ("all_gather", 8)])
def test_the_fit_gives_back_the_alpha_and_beta_that_made_the_points(op, n):
    alpha, beta = 37e-6, 2.5e9
    fit = alpha_beta(_points(op, n, alpha, beta, [4, 64 << 10, 1 << 20, 4 << 20, 16 << 20]))[0]
    got = cost.ring_alpha_beta(fit)
    assert got["alpha_s"] == pytest.approx(alpha, rel=1e-6)
    assert got["beta_Bps"] == pytest.approx(beta, rel=1e-6)
    assert got["steps"] == cost.STEPS[op](n)


def test_the_fit_can_tell_other_numbers_apart():
    """The twin: points made with another beta do not give back the first one."""
    fit = alpha_beta(_points("all_reduce", 4, 37e-6, 1e9, [4, 1 << 20, 16 << 20]))[0]
    assert cost.ring_alpha_beta(fit)["beta_Bps"] != pytest.approx(2.5e9, rel=0.1)
    flat = dict(fit, beta_GBps=None)
    with pytest.raises(ValueError, match="no bandwidth"):
        cost.ring_alpha_beta(flat)
    with pytest.raises(ValueError, match="not 'barrier'"):
        cost.collective_s("barrier", 4, 4, 1e-6, 1e9)


def test_the_ring_prediction_is_2_n_minus_1_steps_of_a_chunk():
    assert ring.predict_s(4 << 20, 4, 50e-6, 1e9) == pytest.approx(6 * (50e-6 + (1 << 20) / 1e9))
    assert cost.collective_s("all_reduce", 16 << 20, 4, 50e-6, 1e9) == pytest.approx(0.0254658, rel=1e-5)


def test_a_bucket_plan_pays_alpha_per_call_and_leaves_the_last_bucket_after_backward():
    g, call, bps = 32 << 20, 1e-3, 1e9
    one = cost.bucket_plan(g, g, call, bps, backward_s=0.5)
    assert one["calls"] == 1 and one["exposed_s"] == pytest.approx(call + g / bps)  # nothing overlaps
    tiny = cost.bucket_plan(g, 64 << 10, call, bps, backward_s=0.0)
    assert tiny["calls"] == 512 and tiny["comm_s"] == pytest.approx(512 * call + g / bps)
    uneven = cost.bucket_plan(10, 4, 0.0, 1.0, backward_s=0.0)
    assert uneven["calls"] == 3 and uneven["comm_s"] == pytest.approx(10.0)  # buckets of 4, 4 and 2 bytes
    best, plans = cost.choose_bucket(g, call, bps, backward_s=0.1)
    sizes = [p["bucket_bytes"] for p in plans]
    assert sizes == sorted(sizes) and sizes[-1] == g  # sizes above the gradients become one bucket of them all
    assert best["bucket_bytes"] not in (sizes[0], sizes[-1])  # neither extreme: the trade-off has a middle
    assert best["exposed_s"] == min(p["exposed_s"] for p in plans)
    assert "<- chosen" in cost.plan_table(plans, best).splitlines()[sizes.index(best["bucket_bytes"]) + 1]
    with pytest.raises(ValueError):
        cost.bucket_plan(0, 1, call, bps, 0.1)


def test_the_fit_picture_is_a_png():
    pts = _points("all_reduce", 4, 37e-6, 1e9, [4, 1 << 20, 16 << 20])
    png = cost.fit_png(pts[:-1], alpha_beta(pts[:-1])[0], held_out=pts[-1:])
    assert png.startswith(b"\x89PNG") and len(png) > 1000


def test_the_concepts_page_and_the_cost_labs_write_the_alpha_beta_model_one_way():
    """One convention on the site: a message of n bytes costs alpha + n/beta, beta the bandwidth, as the course's
    code computes it (`cost.collective_s` divides by beta_Bps). The Concepts page once wrote n·beta with beta the
    time per byte beside labs 20 and 21's m/beta; its one mention of that other convention says so in words."""
    import json
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "docs", "concepts.md"), encoding="utf-8") as f:
        concepts = f.read()
    texts = {"docs/concepts.md": concepts}
    for name in ("20_ring_all_reduce", "21_cost_model"):
        with open(os.path.join(root, "labs", f"{name}.ipynb"), encoding="utf-8") as f:
            texts[name] = "\n".join("".join(c["source"]) for c in json.load(f)["cells"])
    for where, text in texts.items():
        times_beta = [m.group(0) for m in re.finditer(r"\b[nm]\s*[·*×]\s*β", text)]  # bytes times beta (α·β is bytes)
        assert times_beta == (["n·β"] if where == "docs/concepts.md" else []), (where, times_beta)
        assert re.search(r"/\s*β", text), where
    assert "with `β` the time per byte: the same model" in concepts
    # the latency-optimal all_reduce: recursive doubling, log2(p) steps of the whole message
    row = next(line for line in concepts.splitlines() if line.startswith("| all_reduce |"))
    assert "recursive doubling (p a power of two): `log2(p)·(α + n/β)`" in row, row
    # the convention the labs compute with: 2(p-1) steps of alpha, 2(p-1)/p of the bytes over beta (bytes/s)
    assert cost.collective_s("all_reduce", 1e9, 4, 0.0, 1e9) == pytest.approx(2 * 3 / 4)
