"""Why a rank diverged (issue 29), on real gloo runs of programs written after the rules by authors who had not read
them (`benchmarks/corpus_after/`, ground truth from plain torchrun in GROUND_TRUTH_A.md). A rank that skips a
collective its peers make: the peers wait in the call, the odd rank's call is one they made earlier or one further
on, and the statement that took it past (`continue`, `return`, an exception caught) is named with its line and its
`if`; the source reading alone is `sandbox.branches.early_exit`, tested on small files here. A rank busy in its own
code while its peers time out at init: the straggler, with the line it was on."""
import os
import textwrap

import pytest

from conftest import ROOT
from sandbox import branches, run_script

CORPUS = os.path.join(ROOT, "benchmarks", "corpus_after")

CASES = {
    # case: (world, culprits, the peers' call line, the statement's words)
    "missing_nan_loss_skip": (4, [2], 46, "`continue` at benchmarks/corpus_after/missing_nan_loss_skip.py:42 (under "
                                          "`if not torch.isfinite(loss):` at benchmarks/corpus_after/"
                                          "missing_nan_loss_skip.py:40) leaves the loop"),
    "missing_caught_exception_metric": (3, [2], 51, "caught by `except ZeroDivisionError:` at benchmarks/corpus_after/"
                                                    "missing_caught_exception_metric.py:53 leaves the try block"),
    "missing_optim_none_grad_return": (2, [1], 32, "`return` at benchmarks/corpus_after/missing_optim_none_grad_return"
                                                   ".py:31 (under `if p.grad is None:` at benchmarks/corpus_after/"
                                                   "missing_optim_none_grad_return.py:30) leaves step()"),
    # written by a fifth author (GROUND_TRUTH_E.md): no statement leaves, the call sits in an `if` on its data
    "missing_clip_norm_grad_none": (2, [1], 36, "The all_reduce at benchmarks/corpus_after/missing_clip_norm_grad_none"
                                                ".py:36 sits under `if expert_grads:` at benchmarks/corpus_after/"
                                                "missing_clip_norm_grad_none.py:34: a rank for which that is false"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_rank_that_skipped_the_call_is_named_with_the_statement(clean, case):
    world, culprits, line, said = CASES[case]
    res = run_script(os.path.join(CORPUS, f"{case}.py"), world_size=world)
    d = res.diagnosis
    assert not res.ok and d.kind == "missing_ranks", (res.verdict, d.kind, d.summary)
    assert d.culprit_ranks == culprits, d.summary
    assert d.site == f"benchmarks/corpus_after/{case}.py:{line}", d.site
    who = f"Rank {culprits[0]} skipped a call its peers make: "
    assert d.summary.startswith(who) and said in d.summary, d.summary
    twin = run_script(os.path.join(CORPUS, f"{case}.fixed.py"), world_size=world)
    assert twin.ok and not twin.warnings, twin.diagnosis.summary


def _exit(tmp_path, body, line):
    path = tmp_path / f"prog{len(list(tmp_path.iterdir()))}.py"  # a file is parsed once per process: one per case
    path.write_text(textwrap.dedent(body))
    return branches.early_exit(f"{path}:{line}")


def test_each_kind_of_exit_is_found_before_the_call_and_none_elsewhere(tmp_path):
    loop = """\
        def train(batches):
            for b in batches:
                if b is None:
                    {stmt}
                dist.all_reduce(b)
        """
    for i, (stmt, leaves) in enumerate((("continue", "the loop"), ("break", "the loop"), ("return", "train()"),
                                        ("raise ValueError(b)", "train()"))):
        e = _exit(tmp_path, loop.format(stmt=stmt), 5)
        assert (e["stmt"], e["leaves"], e["test"], e["site"], e["if_site"]) == (
            stmt.split()[0], leaves, "b is None", f"{tmp_path}/prog{i}.py:4", f"{tmp_path}/prog{i}.py:3"), e
    # an exit after the call, one that is not under an `if`, and an `if` without an exit: nothing to name
    assert _exit(tmp_path, """\
        def train(batches):
            for b in batches:
                dist.all_reduce(b)
                if b is None:
                    continue
        """, 3) is None
    assert _exit(tmp_path, """\
        def train(batches):
            for b in batches:
                if b is None:
                    b = zeros()
                dist.all_reduce(b)
        """, 5) is None
    # ...and with no statement that leaves, the `if` the call itself sits in
    e = _exit(tmp_path, """\
        def clip(grads):
            if grads:
                dist.all_reduce(norm(grads))
        """, 3)
    assert (e["stmt"], e["test"], e["site"].endswith(":2")) == ("if", "grads", True), e
    # a `break` after the call, in the loop around it, skips it in the later rounds
    e = _exit(tmp_path, """\
        def train(batches):
            for b in batches:
                dist.all_reduce(b)
                if b.sum() > 9:
                    break
        """, 3)
    assert (e["stmt"], e["leaves"], e["test"]) == ("break", "the loop", "b.sum() > 9"), e
    # a `continue` of an inner loop the call is not in does not leave the call's loop
    assert _exit(tmp_path, """\
        def train(batches):
            for b in batches:
                for x in b:
                    if x is None:
                        continue
                dist.all_reduce(b)
        """, 6) is None
    # an exception caught around the call, where the handler does not raise again
    e = _exit(tmp_path, """\
        def log(x):
            try:
                y = 1 / x
                dist.all_reduce(y)
            except ZeroDivisionError:
                pass
        """, 4)
    assert (e["stmt"], e["test"], e["site"].endswith(":5"), e["if_site"].endswith(":2")) == (
        "except", "ZeroDivisionError", True, True), e
    assert _exit(tmp_path, """\
        def log(x):
            try:
                dist.all_reduce(x)
            except RuntimeError:
                raise
        """, 3) is None


@pytest.mark.slow
def test_a_rank_busy_past_the_init_timeout_is_the_straggler(clean):
    """Rank 1 tokenizes a shard seven times larger before init_process_group (timeout 10 s): ranks 0 and 2 raise
    DistStoreError at init, first rank 0. The cause is rank 1, in its own code, named with the line it was on and
    the line of main that called it; not rank 0, which only noticed first."""
    res = run_script(os.path.join(CORPUS, "init_late_tokenizer_shard.py"), world_size=3)
    d = res.diagnosis
    assert (d.kind, d.culprit_ranks, d.op) == ("straggler", [1], "init_process_group"), d.summary
    assert d.summary.startswith("Not a hang: ranks 0 and 2 timed out in init_process_group at "
                                "benchmarks/corpus_after/init_late_tokenizer_shard.py:38"), d.summary
    assert ("rank 1 was running its own code at benchmarks/corpus_after/init_late_tokenizer_shard.py:28 (in "
            "build_vocab), called from benchmarks/corpus_after/init_late_tokenizer_shard.py:37 (in main)") in d.summary


def test_a_rank_that_left_its_peers_loop_by_break_stays_a_collective_mismatch(tmp_path):
    """`break` is passed over when the skip rule reads the source: a rank that left the loop its peers are in is
    a collective mismatch, as the catalogue's aux-data bug and lab 08 document it."""
    e = _exit(tmp_path, """\
        def train(batches):
            for b in batches:
                dist.all_reduce(b)
                if b.sum() > 9:
                    break
            dist.barrier()
        """, 3)
    assert e["stmt"] == "break"
    path = sorted(tmp_path.iterdir())[-1]
    assert branches.early_exit(f"{path}:3", without=("break",)) is None
