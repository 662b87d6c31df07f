"""Collectives from a second thread, written from bug reports of this class (a metrics logger, an asynchronous
checkpoint, a heartbeat timer, a background evaluator, a prefetching sampler, each on the group the training loop
uses) by a helper that had not read the sandbox, with their outcomes under plain torchrun (tests/data/threads/
GROUND_TRUTH.md: each faulty one failed 3 runs of 3, each twin passed 3 of 3). Before the tracer recorded threads,
the sandbox named the mismatch and its rank but not that the odd call came from another thread (0 of 5); now each
names the thread, its function and the main thread's call it fell against, and the twins pass with no warning.

The programs mostly sleep (their data loading), so the seven run at once, in one fixture."""
import concurrent.futures
import os
import re

import pytest

from conftest import leftovers
from sandbox import run_script

pytestmark = pytest.mark.slow  # real runs of a dozen programs: the full suite's, not the quick tier's

CASES = os.path.join(os.path.dirname(__file__), "data", "threads")
# file, ranks, the thread's name (as threading names it: an unnamed thread's number is its process's count of
# threads so far), the ground truth's culprit ranks
FAULTY = [("t1_metrics_logger", 2, "metrics-logger", [1]), ("t2_async_checkpoint", 3, "async-ckpt_0", [2]),
          ("t3_heartbeat_timer", 4, r"Thread-\d+", [3]), ("t4_background_eval", 4, "async-eval", [1, 3]),
          ("t5_prefetch_sampler", 3, r"Thread-\d+ \(prefetch_epochs\)", [0])]
TWINS = [("ok1_metrics_logger_own_group", 2), ("ok2_async_checkpoint_wait", 3)]


@pytest.fixture(scope="module")
def runs():
    todo = [(name, n) for name, n, *_ in FAULTY] + TWINS
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(todo)) as pool:
        futures = {name: pool.submit(run_script, os.path.join(CASES, name + ".py"), world_size=n, timeout=90)
                   for name, n in todo}
        done = {name: f.result() for name, f in futures.items()}
    assert leftovers() == []
    return done


@pytest.mark.parametrize("name, n, thread, culprits", FAULTY, ids=[c[0] for c in FAULTY])
def test_a_collective_from_a_second_thread_is_named_with_its_thread(runs, name, n, thread, culprits):
    res = runs[name]
    d = res.diagnosis
    assert not res.ok and d.kind == "collective_mismatch", (res.verdict, d.summary)
    assert d.culprit_ranks == culprits, d.summary
    named = d.details.get("thread") or {}
    odd = sorted(int(r) for r, t in named.items() if t is not None and re.fullmatch(thread, t))
    assert odd and None in named.values() and len(set(named.values())) == 2, named
    assert re.search(f"from the thread `{thread}` \\(in `\\w+`\\)", d.summary), d.summary
    assert "from the main thread" in d.summary and "group of its own" in d.summary, d.summary


@pytest.mark.parametrize("name, n", TWINS, ids=[c[0] for c in TWINS])
def test_the_twins_with_a_group_of_their_own_or_a_join_pass_with_no_warning(runs, name, n):
    res = runs[name]
    assert res.ok and res.warnings == [], (res.diagnosis.summary, res.warnings)
