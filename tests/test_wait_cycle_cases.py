"""Deadlocks that are a cycle of waits across process groups, written from bug reports of this class (torchrec's
"whichever is ready first" overlap of a shard-group all_gather and a world all_reduce, a pipeline stage's recv
against a tied-embedding all_reduce, a halo exchange over pair groups, a "main process first" barrier against an
evaluation group's broadcast, a loss-scaler overflow check against the data-parallel groups) by a helper that had
not read the sandbox, with their outcomes under plain torchrun (tests/data/wait_cycle/GROUND_TRUTH.md: each faulty
one timed out 3 runs of 3, each twin passed 3 of 3).

Before the wait-for graph the sandbox called each of them `missing_ranks`, naming the ranks one call waited for;
now each is a `wait_cycle`: the ranks of the cycle in order, each one's call and whom it waits for, the ranks
waiting behind it, the ranks that left the common path (the ground truth's culprits among them), and it is named
from the traces alone, without the grace period (hang_after is 30 s here, and gloo's own timeout in these programs
10 s: only a deadlock proven at once comes back as a hang)."""
import concurrent.futures
import os

import pytest

from conftest import leftovers
from sandbox import run_script

pytestmark = pytest.mark.slow  # real runs of a dozen programs: the full suite's, not the quick tier's

CASES = os.path.join(os.path.dirname(__file__), "data", "wait_cycle")
# file, ranks, the ranks of the cycle, the ground truth's culprits, what the diagnosis names. In c1 the two ranks
# of the cycle went two ways of one `if` and nobody else is there to say which way is the common one: both are
# named, and the `if`.
FAULTY = [("c1_hetero_stats_overlap", 2, [0, 1], [1], "`if bsz > CLUSTER_PLAN[\"stats_first_above\"]:`"),
          ("c2_pipeline_tied_embed", 3, [0, 1, 2], [2], "recv from rank 1"),
          ("c3_halo_ring_diffusion", 3, [0, 1, 2], [0, 1, 2], "all_gather #1 of group [1, 2]"),
          ("c4_sparse_dense_overlap", 4, [2, 3], [2], "Ranks 0 and 1 wait behind them"),
          ("c5_tokenize_cache_main_first", 3, [0, 1], [0], "Rank 2 waits behind them"),
          ("c6_pp_dp_loss_scaler", 4, None, [3], "recv from rank 3")]
TWINS = [("ok1_pipeline_tied_embed", 3), ("ok2_sparse_dense_overlap", 4)]
HANG_AFTER = 30.0


@pytest.fixture(scope="module")
def runs():
    todo = [(name, n) for name, n, *_ in FAULTY] + TWINS
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(todo)) as pool:
        futures = {name: pool.submit(run_script, os.path.join(CASES, name + ".py"), world_size=n, timeout=90,
                                     hang_after=HANG_AFTER) for name, n in todo}
        done = {name: f.result() for name, f in futures.items()}
    assert leftovers() == []
    return done


@pytest.mark.parametrize("name, n, cycle, culprits, said", FAULTY, ids=[c[0] for c in FAULTY])
def test_a_cycle_across_groups_is_named_as_one_at_once(runs, name, n, cycle, culprits, said):
    res = runs[name]
    d = res.diagnosis
    assert (res.verdict, d.kind) == ("hang", "wait_cycle"), (res.verdict, d.summary)
    assert d.details["blocked_for_s"] < HANG_AFTER, d.details  # proven from the traces, not waited out
    if cycle is not None:  # c6 is a knot of four ranks: whichever cycle of it is named
        assert sorted(d.details["cycle"]) == cycle, d.details
    assert set(culprits) <= set(d.culprit_ranks), d.summary
    ring = d.details["cycle"]
    assert len(d.culprit_ranks) < n or len(culprits) == n or n == len(ring), d.summary  # singled out
    for i, r in enumerate(ring):  # each rank waits for the next, the last for the first
        assert ring[(i + 1) % len(ring)] in d.details["waits"][str(r)]["for"], d.details
    assert d.summary.startswith("Wait cycle across ") and said in d.summary, d.summary


@pytest.mark.parametrize("name, n", TWINS, ids=[c[0] for c in TWINS])
def test_the_twins_in_one_order_pass_with_no_warning(runs, name, n):
    res = runs[name]
    assert res.ok and res.warnings == [], (res.diagnosis.summary, res.warnings)
