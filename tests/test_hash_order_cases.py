"""Programs whose ranks disagree because each process has its own string-hash seed, written from the bug reports of
this class (huggingface/transformers#48162, meta-pytorch/torchrec#4648) by a helper that had not read the sandbox,
with their outcomes under plain torchrun (tests/data/hash_order/GROUND_TRUTH_F.md: every faulty one went wrong in 3 runs
of 3 and behaved with PYTHONHASHSEED=0). With ranks forked from one zygote all six passed here, silently. Now each
one that fails under torchrun fails here with the loop or value that took the set's order named, the silent ones
diverge here as there (their own checks print it), and the twins pass."""
import os
import re

import pytest

pytestmark = pytest.mark.usefixtures("product_seeds")

from sandbox import run_script

CASES = os.path.join(os.path.dirname(__file__), "data", "hash_order")


def _run(name: str, n: int):
    return run_script(os.path.join(CASES, name + ".py"), world_size=n, timeout=60)


def _output(res) -> str:
    return "\n".join(r.output or "" for r in res.ranks)


@pytest.mark.parametrize("name, n, the_set", [("f1_grad_sync_param_groups", 2, "decay"),
                                              ("f3_bucketed_grad_allreduce", 3, "trainable"),
                                              ("f4_sharded_optimizer_owner", 4, "layers")])
def test_a_collective_made_in_a_sets_order_fails_as_under_torchrun_and_the_set_is_named(name, n, the_set, clean):
    res = _run(name, n)
    assert res.diagnosis.kind == "collective_mismatch", (res.verdict, res.diagnosis.summary)
    order = res.diagnosis.details.get("order")
    assert order is not None and order["set"] == the_set, res.diagnosis.summary
    assert f"sorted({the_set})" in res.diagnosis.summary and "hash seed" in res.diagnosis.summary


@pytest.mark.parametrize("name, n, differing", [("f2_ddp_normalizer_buffers", 2, r"differing across ranks: \[(.+)\]"),
                                                ("f6_lora_flat_grad_sync", 3, r"differing across 3 ranks: ([1-9])/8")])
def test_a_silent_divergence_from_a_sets_order_shows_here_as_under_torchrun(name, n, differing, clean):
    """DDP broadcasts buffers by position (f2); a flat all_reduce of same-sized tensors packed in set order (f6):
    nothing fails, and the programs' own checks find the ranks' values differ, as they did under torchrun."""
    res = _run(name, n)
    assert res.ok, res.diagnosis.summary
    assert re.search(differing, _output(res)), _output(res)[-2000:]
    if name.startswith("f2"):  # DDP's copy by position is named, with the set that ordered the buffers
        [w] = [w for w in res.warnings if w.kind == "ddp_order"]
        assert w.ranks == [1] and "`NORMALIZER_STATS`" in w.summary and "silently took rank 0's" in w.summary


@pytest.mark.parametrize("name, n", [("ok1_grad_sync_param_groups_sorted", 2), ("ok2_lora_flat_grad_sync_sorted", 3)])
def test_the_sorted_twins_pass_with_no_warning(name, n, clean):
    res = _run(name, n)
    assert res.ok and res.warnings == [], (res.diagnosis.summary, res.warnings)
    assert "differing across 3 ranks: 0/8" in _output(res) if n == 3 else "loss" in _output(res)
