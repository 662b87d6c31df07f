"""Real GPUs: every catalogue bug's `--gpu` form on NCCL, and the GPU examples. Marked `gpu`: they run where 2 GPUs
are visible and skip elsewhere (`pytest -m gpu` runs only these). The CPU-run tests at the end run everywhere: on a
GPU machine they are what shows that a run without --gpu never touches CUDA."""
import inspect
import json
import os

import pytest

from conftest import ROOT, run_cli, visible_gpus
from sandbox import launch
from sandbox.bugs import registry, run_variant
from sandbox.repro import ranks_for

BUGS = registry()
GPU_CASES = [(slug, v) for slug, b in BUGS.items() if b.gpu for v in ("broken", "fixed")]
EX = os.path.join(ROOT, "examples")


@pytest.mark.gpu
@pytest.mark.parametrize("slug,variant", GPU_CASES, ids=[f"{s}-{v}" for s, v in GPU_CASES])
def test_gpu_variant_behaves_as_documented_for_nccl(slug, variant, clean):
    bug = BUGS[slug]
    n = ranks_for(bug, None, visible_gpus())
    if n > visible_gpus():
        pytest.skip(f"{slug} needs {n} GPUs on NCCL; {visible_gpus()} visible")
    res, ok, why = run_variant(bug, variant, n, gpu=True)
    assert ok, f"{slug} {variant} on NCCL: {why}\n{res.diagnosis.summary}"
    if variant == "fixed":  # a fix breaks no contract on NCCL either
        assert res.warnings == [], [w.summary for w in res.warnings]
    assert "nccl" in {e.get("backend") for e in res.events if e.get("op") == "init_process_group"}


@pytest.mark.gpu
@pytest.mark.parametrize("script,verdict,kind", [("gpu_allreduce.py", "ok", "none"), ("gpu_overlap.py", "ok", "none"),
                                                 ("gpu_mismatch.py", "hang", "collective_mismatch")])
def test_gpu_examples(script, verdict, kind, clean):
    p = run_cli("sandbox.run", "-n", "2", "--gpu", "--json", os.path.join(EX, script))
    out = json.loads(p.stdout)
    assert (out["verdict"], out["diagnosis"]["kind"]) == (verdict, kind), p.stdout + p.stderr
    assert p.returncode == (0 if verdict == "ok" else 1)
    if verdict == "ok":  # no false alarm on NCCL either: the overlap example waits on its async all_reduce
        assert out["warnings"] == [], out["warnings"]


def _what_a_cpu_rank_sees():
    import torch

    return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "available": torch.cuda.is_available(),
            "initialised": torch.cuda.is_initialized()}


def test_a_cpu_run_sees_no_gpu_whatever_the_machine_has(clean):
    res = launch(_what_a_cpu_rank_sees, world_size=2)
    assert res.verdict == "ok", res.diagnosis.summary
    for r in res.ranks:
        assert r.value == {"visible": "", "available": False, "initialised": False}, r.value


def test_the_simulated_devices_raise_the_documented_words_on_any_build(clean):
    """cross-device's CPU run, on a GPU machine too: FakeTensors on cuda:N, and PyTorch's own device check."""
    res, ok, why = run_variant(BUGS["cross-device"], "broken", 2)
    assert ok, why
    assert all("Expected all tensors to be on the same device, but found at least two devices" in
               (r.error or {}).get("message", "") for r in res.ranks if r.error), [r.error for r in res.ranks]


def _old_wording_on_a_simulated_device():
    from sandbox import simulate

    with simulate.devices_checked():
        raise RuntimeError("Unhandled FakeTensor Device Propagation for aten.stack.default, found two different "
                           "devices cuda:0, cuda:1")  # what torch 2.11's FakeTensor check raises


def test_the_older_wording_is_reworded_and_reported_at_the_users_line(clean):
    """torch 2.11's wording, forced on any build: the documented words, and the site is the line of the failing op,
    as on 2.13: not the sandbox's rewording (2.11 once named sandbox/simulate.py), nor the `with` line that entered
    the check (2.11 once cited cross-device's line 104 where the docstring, written on 2.13, cites its stack at 108)."""
    src, first = inspect.getsourcelines(_old_wording_on_a_simulated_device)
    raised_at = f"tests/test_gpu.py:{first + next(i for i, line in enumerate(src) if 'raise RuntimeError' in line)}"
    res = launch(_old_wording_on_a_simulated_device, world_size=2)
    assert res.verdict == "error", res.diagnosis.summary
    raised = [r for r in res.ranks if r.error]  # the first to raise ends the run: the other may be stopped first
    assert raised, res.diagnosis.summary
    for r in raised:
        assert r.error["message"] == ("Expected all tensors to be on the same device, but found at least two devices, "
                                      "cuda:0 and cuda:1!"), r.error
        assert r.error["site"] == raised_at, r.error


@pytest.mark.no_gpu
def test_gpu_without_gpu_is_a_usage_error(clean):
    p = run_cli("sandbox.repro", "kv-sync", "--gpu")
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip() == "sandbox.repro: --gpu needs one GPU per rank: 2 ranks, 0 GPU(s) visible.", p.stderr


@pytest.mark.gpu
def test_an_extra_all_reduce_that_nccl_pairs_with_a_barrier_is_named_as_the_earlier_cause(clean):
    """examples/framework/extra_allreduce.py on NCCL: rank 0's extra all_reduce #2 meets rank 1's barrier #2 (NCCL's
    barrier is a one-element all_reduce). NCCL may complete the two against each other (rank 1 finishes, rank 0 then
    waits in barrier #3: the diagnosis must lead with call #2, the root) or leave both waiting (seen on 2 H100s,
    torch 2.11: a collective mismatch at call #2). Either way call #2 is named, with both sites, and rank 0, which
    made the call rank 1 did not."""
    script = os.path.join(EX, "framework", "extra_allreduce.py")
    with open(script) as f:
        src = f.read().splitlines()
    extra = next(i for i, line in enumerate(src, 1) if "# BUG" in line and "dist.all_reduce(" in line)
    barrier = next(i for i, line in enumerate(src, 1) if "dist.barrier()" in line)
    shown = "examples/framework/extra_allreduce.py"
    p = run_cli("sandbox.run", "-n", "2", "--gpu", "--json", script, timeout=400)  # the run's own limit: 300 s
    out = json.loads(p.stdout)
    d = out["diagnosis"]
    assert (p.returncode, out["verdict"]) == (1, "hang"), p.stdout + p.stderr
    assert d["culprit_ranks"] == [0], d
    r0, r1 = out["ranks"]
    if d["kind"] != "collective_mismatch":  # NCCL paired rank 1's barrier with rank 0's all_reduce: rank 1 went on
        assert d["summary"].startswith("The cause comes earlier: Call #2 of group [0, 1] "), d["summary"]
        assert "was not the same call on every rank: " in d["summary"], d["summary"]
        assert f"rank 0 called all_reduce(shape [4], float32, SUM) at {shown}:{extra}" in d["summary"], d["summary"]
        assert f"rank 1 called barrier() at {shown}:{barrier}" in d["summary"], d["summary"]
        assert d["details"]["root"] == {"seq": 2, "op": "all_reduce"}, d["details"]
        assert (r0["outcome"], r0["pending"]["op"], r0["pending"]["seq"]) == ("hung", "barrier", 3), r0
        assert r1["outcome"] == "ok" or r1["pending"]["op"] == "destroy_process_group", r1
    else:  # both left waiting at call #2
        assert (d["kind"], d["seq"]) == ("collective_mismatch", 2), d
        assert f"rank 0 calls all_reduce(shape [4], float32) at {shown}:{extra}" in d["summary"], d["summary"]
        assert f"rank 1 calls barrier() at {shown}:{barrier}" in d["summary"], d["summary"]
        assert [(r["outcome"], r["pending"]["seq"]) for r in (r0, r1)] == [("hung", 2), ("hung", 2)], (r0, r1)
