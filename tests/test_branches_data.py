"""A mismatch behind a data-dependent `if` names that `if` and the values its condition reads, as a rank-dependent
one is named. On real gloo ranks: lab 07's plausible wrong fix (`if sent_tokens == 0: dist.all_reduce(meta, MAX)`)
on 4 ranks; the same `if` where the ranks that skipped it finish and the others wait; the catalogue's own broken
aux-data, whose ranks leave the polling loop at `if done: break` on their own metadata. On small source files, no
ranks started: what must NOT be called data-dependent (a constant, the world size, a synced value, a loop counter,
an argument, an import). Also the one `if`-finder (`branches.branch_using`) that DDP's unused-parameters rule uses
for both kinds of `if`."""
import linecache
import os
import textwrap

import pytest

from sandbox import branches, launch, run_script
from sandbox.diagnose import origins, positions

# Lab 07's metadata handoff, fixed wrongly: only the ranks that read zeros sync the metadata. Line 13 is the `if`,
# line 15 the all_reduce only ranks 1 and 3 make, line 19 the poll's all_reduce that ranks 0 and 2 go on to.
WRONG_FIX = """\
import datetime
import torch
import torch.distributed as dist
from sandbox.bugs.aux_data import embedding_side, BLOCKS, TP, SUCCESS


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    tp = dist.get_rank()
    cpu_group = dist.new_group(list(range(dist.get_world_size())), backend="gloo")
    block = tp * (BLOCKS // TP)  # each TP rank reads the first block of its own slice
    sent_tokens, actual_total_length = (int(v) for v in embedding_side()[block])
    if {guard}:
        meta = torch.tensor([sent_tokens, actual_total_length])
        dist.all_reduce(meta, op=dist.ReduceOp.MAX, group=cpu_group)
        sent_tokens, actual_total_length = (int(v) for v in meta)
    for poll in range(3):
        status = torch.tensor([SUCCESS])
        dist.all_reduce(status, op=dist.ReduceOp.MIN, group=cpu_group)
        if status.item() == SUCCESS and 0 < actual_total_length <= sent_tokens:
            break
    token = torch.tensor([actual_total_length * 7 % 101])
    tokens = [torch.zeros(1, dtype=token.dtype) for _ in range(dist.get_world_size())]
    dist.all_gather(tokens, token, group=cpu_group)
    dist.destroy_process_group()


main()
"""


def _run(tmp_path, guard, then_exit=False):
    script = tmp_path / "aux.py"
    src = WRONG_FIX.format(guard=guard)
    if then_exit:  # the ranks that skipped the branch make no other call: they finish, the others wait
        src = src.replace("    for poll in range(3):",
                          "    dist.destroy_process_group()\n    return\n    for poll in range(3):")
    script.write_text(src)
    return run_script(str(script), world_size=4, timeout=120)


def _site(res, line):
    """How this run shows line N of the script (its path as the sandbox shows it)."""
    return f"{res.diagnosis.site.rpartition(':')[0]}:{line}"


def test_a_mismatch_behind_a_data_dependent_if_names_the_if_and_what_it_reads(tmp_path, clean):
    res = _run(tmp_path, "sent_tokens == 0")
    d = res.diagnosis
    assert res.verdict == "hang" and d.kind == "collective_mismatch", d.summary
    assert (f"Ranks 1 and 3 reached all_reduce(shape [2], int64) at {_site(res, 15)} through `if sent_tokens == 0:`"
            f" at {_site(res, 13)}, whose condition reads sent_tokens, a value that differs between ranks (it was"
            f" read from this rank's own data); ranks 0 and 2 skipped it, so ranks 1 and 3 made an all_reduce that"
            f" ranks 0 and 2 did not.") in d.summary, d.summary
    assert d.summary.endswith(origins.ADVICE), d.summary
    assert d.culprit_ranks == [1, 3], d.summary  # the ranks that took the branch
    assert d.details["branch"] == {"test": "sent_tokens == 0", "site": _site(res, 13), "taken": "if",
                                   "reads": ["sent_tokens"], "source": "data", "ranks": [1, 3]}, d.details


def test_the_same_mismatch_behind_a_rank_dependent_if_keeps_its_wording(tmp_path, clean):
    res = _run(tmp_path, "dist.get_rank() % 2 == 1")
    d = res.diagnosis
    assert res.verdict == "hang" and d.kind == "collective_mismatch", d.summary
    assert (f"Ranks 1 and 3 reached all_reduce(shape [2], int64) at {_site(res, 15)} through `if dist.get_rank() % 2"
            f" == 1:` at {_site(res, 13)}; ranks 0 and 2 skipped it.") in d.summary, d.summary
    assert "whose condition reads" not in d.summary and origins.ADVICE not in d.summary, d.summary
    assert d.details["branch"] == {"test": "dist.get_rank() % 2 == 1", "site": _site(res, 13), "taken": "if",
                                   "ranks": [1, 3]}, d.details


@pytest.mark.parametrize("guard", ["sent_tokens == 0", "dist.get_rank() % 2 == 1"], ids=["data", "rank"])
def test_ranks_left_waiting_behind_a_data_dependent_if_are_told_which(tmp_path, clean, guard):
    res = _run(tmp_path, guard, then_exit=True)
    d = res.diagnosis
    assert d.kind == "missing_ranks" and d.culprit_ranks == [0, 2], d.summary
    assert d.summary.startswith(f"Ranks 1 and 3 wait in all_reduce #1 of group [0, 1, 2, 3] shape [2] int64 at"
                                f" {_site(res, 15)}, but ranks 0 and 2 never arrive: "), d.summary
    said = (f"Ranks 1 and 3 reached it through `if sent_tokens == 0:` at {_site(res, 13)}, whose condition reads"
            f" sent_tokens, a value that differs between ranks (it was read from this rank's own data). "
            + origins.ADVICE)
    if guard == "sent_tokens == 0":
        assert said in d.summary and d.details["branch"]["reads"] == ["sent_tokens"], d.summary
    else:  # on the rank: this rule's words stay as they were
        assert "reached it through" not in d.summary and "branch" not in d.details, d.summary


def test_ranks_that_left_a_loop_early_on_their_own_data_are_told_which_if(clean):
    """The catalogue's own broken aux-data: no `if` around either call; ranks 0 and 2 left the polling loop at
    `if done: break` (done reads their metadata), ranks 1 and 3 still poll."""
    from sandbox.bugs import aux_data
    path = aux_data.__file__
    lines = open(path).read().splitlines()
    at = {text: next(i for i, t in enumerate(lines, 1) if text in t) for text in ("if done:", "dist.all_gather(")}
    res = launch(aux_data.broken, world_size=4, timeout=120)
    d = res.diagnosis
    assert d.kind == "collective_mismatch" and d.culprit_ranks == [1, 3], d.summary  # the culprits stay the odd ranks
    assert (f"Ranks 0 and 2 reached all_gather(shape [1], int64) at sandbox/bugs/aux_data.py:{at['dist.all_gather(']}"
            f" after leaving the loop at `if done:` at sandbox/bugs/aux_data.py:{at['if done:']}, whose condition"
            f" reads done, a value that differs between ranks (it was read from this rank's own data); ranks 1 and 3"
            f" are still in it.") in d.summary, d.summary
    assert d.details["branch"]["taken"] == "break" and "loop" not in d.details["branch"], d.details


# ------------------------------------------------------------------------------- the rule on source, no ranks

def _branch(tmp_path, src, marker="CALL"):
    """origins.data_branch for the line marked `# CALL` in this source."""
    path = tmp_path / f"m{abs(hash(src))}.py"
    text = textwrap.dedent(src)
    path.write_text(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if f"# {marker}" in t)
    return origins.data_branch([(str(path), line)])


def test_a_branch_on_data_read_by_the_rank_is_data_dependent(tmp_path):
    b = _branch(tmp_path, """\
        import torch.distributed as dist
        def step(loader, x):
            batch = next(loader)
            n = len(batch)
            if n == 0:
                dist.all_reduce(x)  # CALL
        """)
    assert b is not None and (b["test"], b["taken"], b["reads"], b["source"]) == ("n == 0", "if", ["n"], "data"), b
    assert b["site"].endswith(":5"), b
    assert origins.because(b) == (", whose condition reads n, a value that differs between ranks (it was read from"
                                  " this rank's own data)")


def test_the_else_of_a_data_dependent_if_and_two_names_read(tmp_path):
    b = _branch(tmp_path, """\
        import torch.distributed as dist
        def step(x):
            a, b = load_meta()
            if a > 0 and b > a:
                pass
            else:
                dist.all_reduce(x)  # CALL
        """)
    assert b is not None and (b["taken"], b["reads"]) == ("else", ["a", "b"]), b
    assert origins.because(b) == (", whose condition reads a and b, values that can differ between ranks (read"
                                  " from this rank's own data)")


def test_a_value_computed_from_the_rank_is_said_to_be(tmp_path):
    b = _branch(tmp_path, """\
        import torch.distributed as dist
        tp = dist.get_rank()
        half = tp // 2
        if half == 0:
            dist.barrier()  # CALL
        """)
    assert b is not None and (b["reads"], b["source"]) == (["half"], "rank"), b
    assert "(it was computed from the rank)" in origins.because(b)


@pytest.mark.parametrize("src", [
    """\
    import torch.distributed as dist
    DEBUG = False
    if DEBUG:
        dist.barrier()  # CALL
    """,
    """\
    import torch.distributed as dist
    def f(x):
        ws = dist.get_world_size()
        if ws > 2:
            dist.all_reduce(x)  # CALL
    """,
    """\
    import torch.distributed as dist
    def f(x):
        if dist.get_world_size() % 2 == 0 and LIMIT > 3:
            dist.all_reduce(x)  # CALL
    LIMIT = 4 * 2
    """,
    """\
    import torch
    import torch.distributed as dist
    def f(x):
        n = load()
        n = torch.tensor([n])
        dist.all_reduce(n)
        if n.item() > 0:
            dist.all_reduce(x)  # CALL
    """,
    """\
    import torch.distributed as dist
    def f(x):
        for step in range(10):
            if step % 5 == 0:
                dist.all_reduce(x)  # CALL
    """,
    """\
    import torch.distributed as dist
    def f(x, log_every):
        if log_every:
            dist.all_reduce(x)  # CALL
    """,
    """\
    import torch.distributed as dist
    from config import STEPS
    def f(x):
        if STEPS > 3:
            dist.all_reduce(x)  # CALL
    """,
], ids=["module-constant", "world-size", "world-size-call-and-constant", "synced", "loop-counter", "argument",
        "import"])
def test_a_branch_on_what_is_the_same_on_every_rank_is_not_data_dependent(tmp_path, src):
    assert _branch(tmp_path, src) is None


def test_a_sync_only_some_ranks_make_does_not_make_the_value_the_same(tmp_path):
    b = _branch(tmp_path, """\
        import torch.distributed as dist
        def f(x):
            n = load()
            if x is None:
                dist.all_reduce(n)
            if n > 0:
                dist.all_reduce(x)  # CALL
        """)
    assert b is not None and b["reads"] == ["n"] and b["site"].endswith(":6"), b


def test_an_if_that_does_not_hold_the_call_is_not_named(tmp_path):
    assert _branch(tmp_path, """\
        import torch.distributed as dist
        def f(x):
            n = load()
            if n == 0:
                x = x * 2
            dist.all_reduce(x)  # CALL
        """) is None


POLL = """\
    import torch.distributed as dist
    def poll(meta):
        n = read_meta()
        for i in range(3):
            status = engine_status()
            dist.all_reduce(status)  # PREV
            if {test}:
                break
        dist.all_gather(meta)  # CALL
    """


def _break(tmp_path, test):
    path = tmp_path / f"p{abs(hash(test))}.py"
    text = textwrap.dedent(POLL.format(test=test))
    path.write_text(text)
    line = {m: next(i for i, t in enumerate(text.splitlines(), 1) if f"# {m}" in t) for m in ("PREV", "CALL")}
    return origins.data_break([(str(path), line["CALL"])], [(str(path), line["PREV"])])


def test_an_if_that_leaves_the_loop_on_data_is_found_between_the_two_calls(tmp_path):
    b = _break(tmp_path, "n > 0")
    assert b is not None and (b["test"], b["taken"], b["reads"]) == ("n > 0", "break", ["n"]), b
    assert b["site"].endswith(":7") and b["loop"][1:] == (4, 8), b
    assert _break(tmp_path, "i == 2") is None  # the loop counter: the same on every rank
    assert _break(tmp_path, "status.item() > 0") is None  # the value all_reduced just before: the same everywhere
    path = tmp_path / "two.py"  # the loop is another function's: the call after it is not reached by leaving it
    path.write_text(textwrap.dedent(POLL.format(test="n > 0")).replace("    dist.all_gather(meta)  # CALL",
                                                                       "def after(meta):\n    dist.all_gather(meta)"))
    assert origins.data_break([(str(path), 10)], [(str(path), 6)]) is None


def test_a_notebook_cells_source_is_read_from_linecache(tmp_path):
    name = f"/nonexistent/ipykernel_0/{tmp_path.name}.py"  # a cell: no file, its lines in the kernel's linecache
    text = "import torch.distributed as dist\nn = read()\nif n:\n    dist.barrier()\n"
    linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    try:
        b = origins.data_branch([(name, 4)])
    finally:
        del linecache.cache[name]
    assert b is not None and b["test"] == "n", b


# ------------------------------------------------------------------ one `if`-finder for the unused-parameters rule

def test_branch_using_finds_the_rank_dependent_if_or_any(tmp_path):
    src = tmp_path / "model.py"
    src.write_text(textwrap.dedent("""\
        class M:
            def forward(self, x, image=None):
                if image is not None:
                    x = x + self.vision(image)
                if self.rank == 0:
                    x = x + self.extra(x)
                return self.head(x)
        """))
    assert branches.branch_using([str(src)], ["vision"]) is None  # its `if` does not read the rank
    got = branches.branch_using([str(src)], ["vision"], rank_dependent=False)
    assert got is not None and (got["test"], got["attrs"]) == ("image is not None", ["vision"]), got
    got = branches.branch_using([str(src)], ["extra", "vision"])
    assert got is not None and (got["test"], got["attrs"]) == ("self.rank == 0", ["extra"]), got
    assert got["site"].endswith("model.py:5"), got
    assert branches.function_uses(f"{src}:6", "self.extra(") and not branches.function_uses(f"{src}:6", "no_sync(")
    assert not branches.function_uses(f"{tmp_path / 'missing.py'}:3", "x")


def test_branch_using_finds_an_if_that_skips_a_module_list_by_continue(tmp_path):
    """LayerDrop (stochastic depth): a random draw skips a block of `self.blocks` with `continue`; the blocks are
    named by their attribute in the loop's iterable, not in the `if`'s body."""
    src = tmp_path / "model.py"
    src.write_text(textwrap.dedent("""\
        class M:
            def forward(self, x):
                for block in self.blocks:
                    if self.training and torch.rand(1).item() < self.p:
                        continue
                    x = x + block(x)
                for layer in self.layers:
                    if layer is None:
                        break
                return x
        """))
    got = branches.branch_using([str(src)], ["blocks"], rank_dependent=False)
    assert got is not None and got["site"].endswith("model.py:4") and got["skips"].endswith("model.py:3"), got
    assert branches.branch_using([str(src)], ["layers"], rank_dependent=False) is None  # a `break`, not a skip


def test_a_branch_on_a_value_computed_from_the_rank_is_not_told_to_sync_it(clean):
    """No sync makes a rank-derived value equal: its advice is to take the collective out of the branch."""
    from sandbox import launch

    def skip_on_zero():
        import torch.distributed as dist
        r, n = dist.get_rank(), dist.get_world_size()
        if r != 0:
            dist.barrier()

    d = launch(skip_on_zero, world_size=3, init=True).diagnosis
    assert "(it was computed from the rank)" in d.summary, d.summary
    assert origins.RANK_ADVICE in d.summary and origins.ADVICE not in d.summary, d.summary


def test_a_loop_over_a_container_an_if_on_the_ranks_data_fills_is_found(tmp_path):
    """`for name, v in metrics.items(): dist.all_reduce(v)` runs once more on the ranks whose random draw added a
    key: positions.loop_filled names the loop, the container, the statement that filled it and the `if` (with what
    its condition reads); a container filled alike on every rank (a step count, unconditionally) is not named."""
    src = tmp_path / "job.py"
    src.write_text(textwrap.dedent("""\
        import random
        import torch.distributed as dist
        def step(loss, x, s, loader):
            metrics = {"loss": loss}
            if random.random() >= 0.3:
                metrics["grad_norm"] = x
            for name, value in metrics.items():
                dist.all_reduce(value)
            logs = [loss]
            if s % 10 == 0:
                logs.append(x)
            for v in logs:
                dist.all_reduce(v)
            extra = []
            batch = next(loader)
            if batch.sum() > 0:
                extra.append(x)
            for v in enumerate(extra):
                dist.all_reduce(v)
        """))
    import ast

    tree = ast.parse(src.read_text())
    got = positions.loop_filled(tree, str(src), 8)
    assert got is not None and (got["container"], got["test"], got["reads"]) == (
        "metrics", "random.random() >= 0.3", ["random.random()"]), got
    assert got["site"].endswith("job.py:5") and got["loop"].endswith("job.py:7") and got["filled"].endswith(":6")
    assert got.get("random") and "drawn from this rank's own random generator" in origins.because(got)
    assert positions.loop_filled(tree, str(src), 13) is None  # `s % 10`: the same step on every rank
    got = positions.loop_filled(tree, str(src), 19)
    assert got is not None and (got["container"], got["reads"]) == ("extra", ["batch"]) and "random" not in got



def test_sources_parsed_from_several_threads_at_once_all_parse():
    """Runs judged in a pool's threads parse their scripts at once. CPython before 3.13 keeps one AST depth counter
    per interpreter, and two parses interleaved by a thread switch (a collection running a finalizer is enough)
    failed with "SystemError: AST constructor recursion depth mismatch" (seen in CI on 6 cycle cases run together).
    The package's one parser (`branches.parse`, which `parsed_source` uses) must not."""
    import sys
    import threading

    src = open(os.path.join(os.path.dirname(__file__), "data", "wait_cycle", "c4_sparse_dense_overlap.py"),
               encoding="utf-8").read()

    class Finalized:  # the GC's finalizers run Python code, where the interpreter may switch threads
        def __del__(self):
            sum(range(50))

    def churn():
        for _ in range(100_000):
            a, b = Finalized(), Finalized()
            a.other, b.other = b, a

    failures = []

    def parse():
        for _ in range(150):
            try:
                branches.parse(src, "c4_sparse_dense_overlap.py")
            except SystemError as e:
                failures.append(str(e))
                return

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        threads = [threading.Thread(target=churn)] + [threading.Thread(target=parse) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        sys.setswitchinterval(old)
    assert not failures, failures[:3]
