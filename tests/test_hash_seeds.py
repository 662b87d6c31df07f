"""Ranks differ where separate processes differ: each of torchrun's workers draws its own string-hash seed, so a set
of strings iterates in another order on every rank. Forked from one zygote, ranks would share one seed and hide such a
bug; the sandbox deals them among zygotes with seeds of their own (`sandbox.defaults.HASH_SEEDS`), rank r in zygote
r % HASH_SEEDS, cold and warm alike. Where the run's environment sets PYTHONHASHSEED every rank has one seed."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.usefixtures("product_seeds")

from sandbox import defaults, launch, run_script

COLD_AND_WARM = [pytest.param(False, marks=pytest.mark.slow), True]  # the cold start, measured on purpose: full suite

NAMES = ["encoder.weight", "encoder.bias", "decoder.weight", "decoder.bias", "head.scale", "embed.table",
         "norm.gamma", "norm.beta", "proj.out", "proj.in", "attn.qkv", "attn.out"]

SET_ORDER = f"""\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
for name in set({NAMES!r}):  # the order of a set of strings: the process's hash seed decides it
    dist.all_reduce(torch.ones(len(name)))
dist.destroy_process_group()
"""


def _hashes():
    return {"hash": hash("encoder.weight"), "order": list(set(NAMES)), "env": os.environ.get("PYTHONHASHSEED")}


def _seed_of(env_seed: str) -> int:
    return int(subprocess.run([sys.executable, "-c", "print(hash('encoder.weight'))"], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONHASHSEED=env_seed), check=True).stdout)


@pytest.mark.parametrize("warm_run", COLD_AND_WARM, ids=["cold", "warm"])
def test_ranks_of_different_zygotes_hash_strings_differently_as_torchruns_workers_do(warm_run, clean):
    assert defaults.HASH_SEEDS == 2
    res = launch(_hashes, world_size=4, warm=warm_run)  # warm: the worker's zygote, with a sibling for the 2nd seed
    assert res.ok, res.diagnosis.summary
    v = res.values
    assert v[0]["hash"] == v[2]["hash"] and v[1]["hash"] == v[3]["hash"]  # rank r in zygote r % 2
    assert v[0]["hash"] != v[1]["hash"]
    assert [x["env"] for x in v] == [None] * 4  # the seed is the process's, not a variable the ranks see


def test_pythonhashseed_in_the_runs_environment_gives_every_rank_that_seed(clean):
    res = launch(_hashes, world_size=4, warm=False, env={"PYTHONHASHSEED": "0"})
    assert res.ok, res.diagnosis.summary
    assert {x["hash"] for x in res.values} == {_seed_of("0")}
    assert [x["env"] for x in res.values] == ["0"] * 4


def test_a_set_ordered_script_fails_here_as_under_torchrun_and_passes_with_one_seed(tmp_path, clean):
    """A 2-rank job that all_reduces one tensor per name of a set of 12 strings: under torchrun the two processes
    iterate it in different orders (the shapes disagree); with PYTHONHASHSEED set they agree."""
    script = tmp_path / "set_order.py"
    script.write_text(SET_ORDER)
    res = run_script(str(script), world_size=2)
    assert res.diagnosis.kind == "collective_mismatch", (res.verdict, res.diagnosis.summary)
    same = run_script(str(script), world_size=2, env={"PYTHONHASHSEED": "0"})
    assert same.ok, same.diagnosis.summary


def test_sandbox_hash_seeds_1_gives_every_rank_one_seed_and_the_number_follows_the_environment(monkeypatch, clean):
    assert [defaults.hash_seeds(e, n) for e, n in (({}, 4), ({}, 1), ({"PYTHONHASHSEED": "7"}, 4),
                                                    ({"SANDBOX_HASH_SEEDS": "3"}, 4), ({"SANDBOX_HASH_SEEDS": "3"}, 2),
                                                    ({"SANDBOX_HASH_SEEDS": "0"}, 4), ({}, None))] == [2, 1, 1, 3, 2, 2, 2]
    monkeypatch.setenv("SANDBOX_HASH_SEEDS", "1")
    res = launch(_hashes, world_size=4, warm=False)
    assert res.ok, res.diagnosis.summary
    assert len({x["hash"] for x in res.values}) == 1


NUMPY_DRAW = """\
import numpy as np
import torch
import torch.distributed as dist
from torch import optim  # what a training script imports: the zygote preloads torch._dynamo, and numpy.random with it

dist.init_process_group("gloo")
if {seed} is not None:
    np.random.seed({seed})
out = [torch.zeros(1, dtype=torch.float64) for _ in range(dist.get_world_size())]
dist.all_gather(out, torch.tensor([np.random.rand()], dtype=torch.float64))
print("DRAWS", len({{o.item() for o in out}}))
dist.destroy_process_group()
"""


@pytest.mark.parametrize("warm_run", COLD_AND_WARM, ids=["cold", "warm"])
def test_unseeded_numpy_draws_differ_between_ranks_as_between_torchruns_workers(warm_run, tmp_path, clean):
    """torchrun's workers each seed NumPy's global generator from the OS; ranks forked from a zygote that imported
    numpy.random (the preload does) shared its state, so every rank of a zygote drew the same numbers. Each rank now
    reseeds it (and Python's `random`, which reseeds itself after a fork anyway); a seed the program sets still
    holds on every rank."""
    pytest.importorskip("numpy")
    for seed, distinct in ((None, 4), (7, 1)):
        script = tmp_path / f"draw_{seed}.py"
        script.write_text(NUMPY_DRAW.format(seed=seed))
        for _ in range(2 if warm_run else 1):  # a warm zygote preloads after its first run: the second forks with it
            res = run_script(str(script), world_size=4, warm=warm_run, timeout=60)
            assert res.ok, res.diagnosis.summary
            assert f"DRAWS {distinct}" in res.ranks[0].output, res.ranks[0].output
