"""The memory calculator (sandbox/course/scale.py) against figures it did not produce: the cases of
tests/data/scale_cases.json, written from the published sources (the ZeRO paper, Korthikanti et al., the
Ultra-Scale Playbook) by someone who had not read the calculator; and what the sandbox measures on lab 23's small
model (a rank's bytes of parameters, gradients and Adam state under data parallelism, ZeRO-1, ZeRO-2 and FSDP, on 4
and 8 ranks), which the calculator must give within the padding of the shards and Adam's step counters.
When a step is communication-bound (`scale.comm_bound`), against tests/data/comm_bound_cases.json, written the same
way from the scaling book's rooflines, the Playbook and the Megatron papers (its .md says how, and where a published
figure and the model part)."""
from __future__ import annotations

import json
import os

import pytest
from conftest import ROOT

from sandbox import lab
from sandbox.course import scale
from sandbox.course import sharding as sh

with open(os.path.join(ROOT, "tests", "data", "scale_cases.json")) as f:
    CASES = json.load(f)
with open(os.path.join(ROOT, "tests", "data", "comm_bound_cases.json")) as f:
    BOUND = json.load(f)


def _id(c: dict) -> str:
    return f"{c['call']}-{c.get('field', 'bytes')}-" + "-".join(f"{k}={v}" for k, v in c["kwargs"].items())


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_the_calculator_gives_the_published_figures(case):
    got = getattr(scale, case["call"])(**case["kwargs"])
    if case["call"] == "model_states":
        got = getattr(got, case["field"])
    want = case["expected_bytes"]
    assert got == pytest.approx(want, rel=max(case["tolerance"], 1e-9)), (case["source"], case["why"])


@pytest.mark.parametrize("n", [4, 8])
def test_the_calculator_gives_what_the_sandbox_measures_on_a_small_model(n, clean):
    """Lab 23's model in float32 with Adam: 467 parameters. The measured bytes hold a little more than the formula:
    the flat vector padded to n equal shards, and Adam's 4-byte step counter per tensor it steps."""
    c = lab.check(sh.measured, n=n, show=False)
    assert c.ok, c
    held = c.result.ranks[0].value
    params = sum(p.numel() for p in sh.make_model().parameters())
    for way, strategy in (("data parallel", "DP"), ("ZeRO-1", "ZeRO-1"), ("ZeRO-2", "ZeRO-2"), ("FSDP", "ZeRO-3")):
        want = scale.model_states(params, strategy, 1 if strategy == "DP" else n, precision="fp32")
        got = held[way]
        for kind, field in (("parameters", "parameters"), ("gradients", "gradients"),
                            ("optimizer state", "optimizer")):
            assert got[kind] == pytest.approx(getattr(want, field), rel=0.03, abs=6 * 4), (way, kind)
        assert sum(got.values()) == pytest.approx(want.total, rel=0.03), way


def test_the_calculator_refuses_what_it_cannot_count():
    with pytest.raises(ValueError, match="strategy is one of DP, ZeRO-1"):
        scale.model_states(1e9, "ZeRO-4")
    with pytest.raises(ValueError, match="precision is 'mixed' or 'fp32'"):
        scale.model_states(1e9, precision="fp8")
    with pytest.raises(ValueError, match="n is a number of GPUs"):
        scale.model_states(1e9, "ZeRO-3", n=0)


def test_the_concepts_page_shows_what_the_calculator_prints():
    """docs/concepts.md's table and activation figures are the calculator's output, not a copy that can drift."""
    page = open(os.path.join(ROOT, "docs", "concepts.md")).read()
    assert scale.table(7.5e9, 64) in page
    gpt3 = dict(seq=2048, micro_batch=1, hidden=12288, heads=96, layers=96)
    said = [scale.activations(**gpt3), scale.activations(**gpt3, tp=8),
            scale.activations(**gpt3, tp=8, sequence_parallel=True),
            scale.activations(**gpt3, tp=8, sequence_parallel=True, recompute=True)]
    assert [f"{b / 1e9:.3g}" for b in said] == ["275", "55.6", "34.4", "0.604"]
    assert "275 GB without parallelism, 55.6 GB per GPU with t = 8, 34.4 GB with sequence parallelism" in page
    assert "and 0.6 GB with full recomputation on top of both" in page


@pytest.mark.parametrize("case", BOUND, ids=[c["id"] for c in BOUND])
def test_when_a_step_is_communication_bound(case):
    got = scale.comm_bound(case["strategy"], **case["args"])
    for key, want in case["expect"].items():
        if isinstance(want, (int, float)) and not isinstance(want, bool):
            assert got[key] == pytest.approx(want, rel=0.1), (key, case["why"])
        else:
            assert got[key] == want, (key, case["why"])


def test_comm_bound_says_what_it_takes():
    with pytest.raises(ValueError, match="strategy is one of DP, ZeRO-1"):
        scale.comm_bound("fsdp", params=1, layers=1, hidden=1, n=2, flops=1, bandwidth=1, tokens=1)
    with pytest.raises(ValueError, match="n is a number of GPUs"):
        scale.comm_bound("DP", params=1, layers=1, hidden=1, n=0, flops=1, bandwidth=1, tokens=1)
    one = scale.comm_bound("ZeRO-3", params=1e9, layers=1, hidden=1, n=1, flops=1e12, bandwidth=1e9, tokens=10)
    assert one["comm_s"] == 0 and one["bound"] == "compute"  # one GPU sends nothing
