"""sandbox.compat: the one module that knows how the supported torch versions differ and the one that names torch's
private API. Read from the source with `ast` (comments and docstrings may name anything: they explain), no other
module of sandbox/ and no code cell of labs/ touches what it wraps; and its functions do on real gloo ranks, on
whichever torch is installed, what torch's own calls do, without a FutureWarning."""
import ast
import glob
import json
import os
import pickle

import pytest
from conftest import ROOT

from sandbox import calls, compat, launch
from sandbox.diagnose import origins, sharding

# torch's private names the sandbox needs (compat's docstring says why each one)
PRIVATE = frozenset({"_get_default_store", "_get_default_group", "_get_process_group_name",
                     "_get_sequence_number_for_group", "_dump_fr_trace", "_dump_fr_trace_json", "_dump_nccl_trace",
                     "_distributed_c10d", "_del_library", "dump_compile_times"})
# torch.distributed calls whose name depends on the version: renamed in 2.13 (the old names warn there, the new ones
# are missing in 2.11), and the list form of all_to_all, which gloo refuses on 2.11
VERSIONED = frozenset({"all_gather_single", "reduce_scatter_single", "all_gather_into_tensor", "reduce_scatter_tensor",
                       "all_to_all"})
DEPRECATED = ("torch.distributed.nn",)  # torch.distributed.nn.functional: a FutureWarning on every call in 2.13
COMPAT = ("compat", "sandbox.compat")  # how code names the module allowed to call the versioned functions


def touches(source: str) -> list[tuple[int, str]]:
    """(line, what) for every place this code names what only sandbox.compat may: a private name (as an attribute,
    an imported name or module, or a string such as getattr's), a versioned call taken from anything but compat,
    or the deprecated module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            if node.attr in PRIVATE or (node.attr in VERSIONED and ast.unparse(node.value) not in COMPAT) or (
                    node.attr == "nn" and ast.unparse(node.value) in ("torch.distributed", "dist")):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            module = getattr(node, "module", None) or ""
            names = [a.name for a in node.names]
            for name in [module] + names if module else names:
                parts = set(name.split("."))
                if parts & PRIVATE or name.startswith(DEPRECATED) or (
                        module.startswith("torch") and name in VERSIONED):
                    found.append((node.lineno, name))
        elif isinstance(node, ast.Constant) and node.value in PRIVATE:
            found.append((node.lineno, repr(node.value)))
    return sorted(set(found))


def code_cells(path: str):
    """(cell number, source) of a notebook's code cells, IPython's magic and shell lines blanked (kept as lines, so
    line numbers hold)."""
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            lines = "".join(cell["source"]).splitlines()
            yield i, "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines)


def outside_compat() -> list[str]:
    bad = []
    for path in sorted(glob.glob(os.path.join(ROOT, "sandbox", "**", "*.py"), recursive=True)):
        if os.path.relpath(path, ROOT) == os.path.join("sandbox", "compat.py"):
            continue
        with open(path, encoding="utf-8") as f:
            bad += [f"{os.path.relpath(path, ROOT)}:{line} {what}" for line, what in touches(f.read())]
    for path in sorted(glob.glob(os.path.join(ROOT, "labs", "*.ipynb"))):
        for i, source in code_cells(path):
            bad += [f"{os.path.relpath(path, ROOT)} cell {i} line {line}: {what}" for line, what in touches(source)]
    return bad


def test_only_compat_names_private_or_versioned_torch_api():
    assert outside_compat() == []


@pytest.mark.parametrize("code", [
    "store = dist.distributed_c10d._get_default_store()",
    "Work = torch._C._distributed_c10d.Work",
    "from torch._C._distributed_c10d import _dump_fr_trace_json",
    "import torch._C._distributed_c10d as c10d",
    "from torch.distributed.distributed_c10d import _get_default_group",
    "name = c10d._get_process_group_name(g)",
    "n = g._get_sequence_number_for_group()",
    "dump = getattr(c10d, '_dump_nccl_trace', None)",
    "dist.reduce_scatter_tensor(out, inp)",
    "dist.all_gather_single(out, inp)",
    "torch.distributed.all_gather_into_tensor(out, inp)",
    "from torch.distributed import reduce_scatter_single",
    "dist.all_to_all(outs, ins)",
    "from torch.distributed.nn.functional import all_reduce",
    "y = torch.distributed.nn.functional.all_reduce(x)",
])
def test_the_scan_finds_each_kind_of_use(code):
    assert touches(code), code


def test_the_scan_leaves_compat_calls_names_and_words_alone():
    code = '''
"""Docstrings may say `torch._C._distributed_c10d._dump_fr_trace()` and dist.reduce_scatter_tensor."""
from sandbox import compat
from sandbox.compat import all_gather_single, default_store
compat.all_gather_single(out, inp)  # a comment may say _get_default_store too
dist.all_to_all_single(out, inp)
ops = ("reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single")
g = dist.group.WORLD
name = g.group_name
'''
    assert touches(code) == []


def test_a_notebooks_magic_lines_are_skipped_and_its_lines_kept(tmp_path):
    nb = {"cells": [{"cell_type": "markdown", "source": ["`_dump_fr_trace_json()`"]},
                    {"cell_type": "code", "source": ["%%sandbox -n 4\n", "import torch\n",
                                                     "from torch._C._distributed_c10d import _dump_fr_trace_json\n"]}]}
    path = tmp_path / "lab.ipynb"
    path.write_text(json.dumps(nb))
    (i, source), = code_cells(str(path))
    assert i == 1 and touches(source) == [(3, "_dump_fr_trace_json"), (3, "torch._C._distributed_c10d")]


# ----------------------------------------------------------------------------------------------- the functions
def test_the_op_families_hold_both_names_of_each_tensor_form():
    for name in (compat.ALL_GATHER_SINGLE, "all_gather_single", "all_gather_into_tensor"):
        assert name in calls.OPS and name in sharding.GATHERS and name in origins.SYNCS, name
    for name in (compat.REDUCE_SCATTER_SINGLE, "reduce_scatter_single", "reduce_scatter_tensor"):
        assert name in calls.OPS and name in sharding.SCATTERS, name


def test_outside_a_process_group():
    import torch
    import torch.distributed as dist

    assert dist.Work is torch._C._distributed_c10d.Work  # the public name compat's docstring gives is the same class
    assert compat.sequence_number() is None  # no default group in the test process
    if not torch.cuda.is_available():
        assert compat.nccl_recorder() is None


def every_compat_call() -> dict:
    """On each rank (the sandbox made the gloo group): every function of compat, with FutureWarnings made errors;
    torch's own differentiable all_reduce beside it; and the private names compat replaced by public ones."""
    import warnings

    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    rank, world = dist.get_rank(), dist.get_world_size()
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        before = compat.sequence_number()
        gathered = torch.empty(2 * world)
        compat.all_gather_single(gathered, torch.tensor([rank, 10.0 + rank]))
        summed, largest = torch.empty(2), torch.empty(2)
        compat.reduce_scatter_single(summed, torch.arange(2.0 * world) + 100 * rank)
        compat.reduce_scatter_single(largest, torch.arange(2.0 * world) + 100 * rank, op=dist.ReduceOp.MAX,
                                     async_op=True).wait()
        out["seq"] = compat.sequence_number() - before
        out["gathered"], out["summed"], out["largest"] = gathered.tolist(), summed.tolist(), largest.tolist()
        x = torch.tensor([1.0 + rank, 2.0], requires_grad=True)
        y = compat.differentiable_all_reduce(x)
        (y * torch.tensor([1.0, 3.0]) * (rank + 1)).sum().backward()  # another loss on each rank
        out["ours"] = (y.tolist(), x.grad.tolist())
        store = compat.default_store()
        store.set(f"compat-{rank}", str(rank))
        out["store"] = store.get(f"compat-{(rank + 1) % world}").decode()
        dumped = pickle.loads(compat.flight_recorder())
        out["flight"] = [e["profiling_name"] for e in dumped.get("entries", [])]
        text = compat.flight_recorder_json()
        out["flight_json"] = None if text is None else len(json.loads(text).get("entries", []))
        out["nccl"] = compat.nccl_recorder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch 2.13 deprecates it: its warning is not the test
        from torch.distributed.nn.functional import all_reduce

        x = torch.tensor([1.0 + rank, 2.0], requires_grad=True)
        y = all_reduce(x)
        (y * torch.tensor([1.0, 3.0]) * (rank + 1)).sum().backward()
        out["torch"] = (y.tolist(), x.grad.tolist())
    sub = dist.new_group(list(range(world)))
    out["public"] = [dist.group.WORLD is c10d._get_default_group(),
                     dist.group.WORLD.group_name == c10d._get_process_group_name(dist.group.WORLD),
                     sub.group_name == c10d._get_process_group_name(sub)]
    return out


def test_every_function_on_real_ranks(clean):
    world = 3
    res = launch(every_compat_call, world_size=world, init=True)
    assert res.verdict == "ok", res.diagnosis.summary
    assert res.warnings == [], [w.summary for w in res.warnings]
    for r, v in enumerate(res.values):
        assert v["gathered"] == [x for q in range(world) for x in (q, 10.0 + q)]
        assert v["summed"] == [world * (2 * r + j) + 100 * sum(range(world)) for j in range(2)]  # part r, summed
        assert v["largest"] == [2 * r + j + 100 * (world - 1) for j in range(2)]  # the MAX over ranks, async
        assert v["seq"] == 3  # one per collective made through compat
        # y: the sum of [1 + r, 2] over 3 ranks; x.grad: dL/dy of every rank's loss ([1, 3] x (r + 1)), summed
        assert v["ours"] == v["torch"] == ([6.0, 6.0], [6.0, 18.0])
        assert v["store"] == str((r + 1) % world)
        assert v["nccl"] is None  # a CPU run
        assert v["public"] == [True, True, True]
        assert v["flight_json"] is None or v["flight_json"] == len(v["flight"]) > 0
    # the trace names the function torch ran, at the line that called compat (compat is plumbing, as torch is)
    made = [e for e in res.events if e["ev"] == "enter" and e["rank"] == 0 and e.get("lens") != "flight"]
    ops = [e["op"] for e in made if e["op"] not in ("init_process_group", "new_group", "all_reduce",
                                                      "destroy_process_group")]
    assert ops[:3] == [compat.ALL_GATHER_SINGLE, compat.REDUCE_SCATTER_SINGLE, compat.REDUCE_SCATTER_SINGLE], ops
    assert all(e["site"].startswith("tests/test_compat.py:") for e in made if e["op"] in ops[:3]), made
    assert [e["op"] for e in made].count("all_reduce") == 4  # 2 forward, 2 backward: ours and torch's


def _mark(folder: str, name: str) -> None:
    open(os.path.join(folder, name), "w").close()


_HELD: list = []  # what the finalizers below watch: it lives until the rank exits


def exit_work(folder: str, dynamo_info: bool):
    """At this rank's end: a handler and a finalizer of the user's, an operator library of the user's, and
    torch._dynamo's compile-time summary (its table made by `compile_times`, replaced here by a marker)."""
    import atexit
    import logging
    import weakref

    import torch
    import torch._dynamo.utils as dynamo_utils

    rank = int(os.environ["RANK"])
    dynamo_utils.compile_times = lambda *a, **k: _mark(folder, f"compile-times-{rank}") or ""
    if dynamo_info:
        logging.getLogger(dynamo_utils.__name__).setLevel(logging.INFO)
    atexit.register(_mark, folder, f"atexit-{rank}")
    held = object.__new__(type("Held", (), {}))
    _HELD.append(held)

    def after_the_library():  # made before the library: at exit, finalizers run newest first, so this one runs after
        try:
            torch.ops.sandbox_exit_test.plus_one(torch.zeros(1))
            _mark(folder, f"library-kept-{rank}")
        except Exception:  # noqa: BLE001  its operator was deregistered
            _mark(folder, f"library-removed-{rank}")
    weakref.finalize(held, after_the_library)
    lib = torch.library.Library("sandbox_exit_test", "DEF")
    lib.define("plus_one(Tensor x) -> Tensor")
    lib.impl("plus_one", lambda x: x + 1, "CPU")
    _HELD.append(lib)
    return torch.ops.sandbox_exit_test.plus_one(torch.zeros(1)).item()


@pytest.mark.parametrize("dynamo_info", [False, True])
def test_a_rank_runs_the_users_exit_work_and_not_torchs_teardown(tmp_path, dynamo_info, clean):
    """A rank ends as a program does: its atexit handlers and finalizers run. Torch's own teardown that nothing
    outside the process sees is left out (it was most of a short run's time: 27-62 ms of every rank's end): the
    operator libraries' finalizers, and torch._dynamo's compile-time summary unless its logger would print it."""
    res = launch(exit_work, world_size=2, args=(str(tmp_path), dynamo_info))
    assert res.verdict == "ok", res.diagnosis.summary
    assert res.values == [1.0, 1.0]
    made = sorted(os.listdir(tmp_path))
    want = [f"atexit-{r}" for r in range(2)] + [f"library-kept-{r}" for r in range(2)]
    if dynamo_info:
        want += [f"compile-times-{r}" for r in range(2)]
    assert made == sorted(want)


def joined_when_my_code_starts():
    """What the store says as the user's code starts: has every rank's init_process_group returned?"""
    from sandbox import rank

    world = int(os.environ["WORLD_SIZE"])
    return compat.default_store().check([rank.JOINED.format(r) for r in range(world)])


def test_the_group_the_sandbox_makes_is_made_on_every_rank_before_the_users_code_runs(clean):
    """With init=True (and @pytest.mark.sandbox) the sandbox makes the group. gloo lets a rank out of
    init_process_group while a peer still connects to it; a rank that failed at once and exited broke that peer's
    init (seen in CI: rank 1 "lost its connection (Gloo connectFullMesh failed ...)" instead of running its test).
    Every rank's init has returned before any rank's code starts."""
    res = launch(joined_when_my_code_starts, world_size=4, init=True)
    assert res.verdict == "ok", res.diagnosis.summary
    assert res.values == [True] * 4


def hooks_seen(set_own: bool):
    """In a rank: set an excepthook of the program's own (or not), then init_process_group (which wraps it)."""
    import sys

    import torch.distributed as dist

    def mine(*exc):
        pass

    if set_own:
        sys.excepthook = mine
    dist.init_process_group("gloo")
    wrapped = sys.excepthook is not (mine if set_own else sys.__excepthook__)
    found = compat.programs_excepthook()
    dist.barrier()  # no collective above: without it a fast rank may leave while a slow one still connects
    dist.destroy_process_group()
    return wrapped, (found is mine) if set_own else found is None


@pytest.mark.parametrize("set_own", [False, True])
def test_the_programs_own_excepthook_is_found_through_torchs_wrapping(set_own, clean):
    """init_process_group wraps sys.excepthook (each line prefixed "[rank<N>]:"); a rank calls the program's own
    hook, if it set one, for its uncaught exception, and prints the traceback itself otherwise."""
    res = launch(hooks_seen, world_size=2, args=(set_own,), init=False)
    assert res.verdict == "ok", res.diagnosis.summary
    assert res.values == [(True, True)] * 2
