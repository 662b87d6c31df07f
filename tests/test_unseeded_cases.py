"""Programs whose unseeded draws (Python's `random`, NumPy's global generator) differ between torchrun's workers,
written blind from bug reports of this class (tests/data/unseeded/GROUND_TRUTH.md: each faulty one failed 3 runs
of 3 under torchrun, the twin passed 3 of 3): each fails here as there, and the twin, which draws on rank 0 and
broadcasts, passes with no warning. (These three import no optimizer, so their zygote never preloaded NumPy's
generator; test_hash_seeds holds the case that did, where ranks of one zygote drew alike before each rank reseeded.)"""
import concurrent.futures
import os

import pytest

from conftest import leftovers
from sandbox import run_script

pytestmark = pytest.mark.slow  # real runs: the full suite's

CASES = os.path.join(os.path.dirname(__file__), "data", "unseeded")
# file, ranks, the kinds accepted (which rank's draw differs, and so the failure's shape, is the run's)
FAULTY = [("u1_multiscale_heatmap", 3, {"collective_mismatch"}), ("u2_thinned_epoch", 4, {"collective_mismatch"}),
          ("u3_shuffled_shards", 4, {"rank_crashed", "rank_error"})]


@pytest.fixture(scope="module")
def runs():
    todo = [(name, n) for name, n, _ in FAULTY] + [("ok1_shuffled_shards", 4)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(run_script, os.path.join(CASES, name + ".py"), world_size=n, timeout=90)
                   for name, n in todo}
        done = {name: f.result() for name, f in futures.items()}
        # A faulty program's failure is itself a draw: u2's 4 ranks each keep Binomial(400, 0.8) samples, and when
        # all 4 counts give the same number of batches (0.39% of runs: the sum over m of P(m batches)^4) it passes
        # under torchrun too. A faulty run that passed is drawn once more, as torchrun would be run again; both
        # passing (1.5e-5 for u2, nil for u1 and u3) is a sandbox whose ranks draw alike.
        for name, n in todo[:-1]:
            if done[name].ok:
                done[name] = run_script(os.path.join(CASES, name + ".py"), world_size=n, timeout=90)
    assert leftovers() == []
    return done


@pytest.mark.parametrize("name, n, kinds", FAULTY, ids=[c[0] for c in FAULTY])
def test_unseeded_draws_differ_between_ranks_and_the_program_fails_as_under_torchrun(runs, name, n, kinds):
    res = runs[name]
    assert not res.ok and res.diagnosis.kind in kinds, (res.verdict, res.diagnosis.summary)


def test_the_twin_that_draws_on_rank_0_and_broadcasts_passes(runs):
    res = runs["ok1_shuffled_shards"]
    assert res.ok and res.warnings == [], (res.diagnosis.summary, res.warnings)
    assert all("val accuracy" in (r.output or "") for r in res.ranks[:1]), res.ranks[0].output
