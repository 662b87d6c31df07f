"""sandbox.primitives: alone (no process group: each helper acts as the one rank of a world of one) and on 4 real
gloo ranks, compared with references computed here in one process. Every refusal is checked on every rank: a
helper that raised on some ranks only would leave the others waiting in a collective."""
import subprocess
import sys

import pytest
import torch
from torch.testing import assert_close

import scenarios_primitives as sp
from conftest import ROOT, leftovers, listening_ports, sandbox_dirs
from sandbox import launch
from sandbox import primitives as P

WORLD = 4


# ---- one process, no process group ---------------------------------------------------------------------------

def test_import_sandbox_does_not_load_primitives():
    code = "import sandbox, sys; print('sandbox.primitives' in sys.modules, 'torch' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.stdout.split() == ["False", "False"], p.stderr


def test_alone_each_helper_returns_its_input():
    assert not P.is_distributed()
    assert (P.get_rank(), P.get_world_size(), P.is_main_process()) == (0, 1, True)
    assert P.get_device() == (torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu"))
    t = sp.grad(0)
    assert P.reduce_tensor(t, op="sum") is t and P.reduce_tensor(t, op="mean") is t and P.reduce_tensor(t) is t
    assert P.reduce_tensor(sp.counts(0), op="sum") is not None  # integers may be summed
    got = P.gather_tensor(t)
    assert len(got) == 1 and got[0] is t
    assert P.broadcast_tensor(t) is t
    assert P.barrier() is None
    obj = {"a": 1}
    assert P.gather_object(obj) == [obj] and P.broadcast_object(obj) is obj


def test_alone_the_refusals_are_the_same_as_on_ranks():
    with pytest.raises(TypeError, match=r"op='mean' needs a floating-point tensor and this one is int64"):
        P.reduce_tensor(sp.counts(0), op="mean")
    with pytest.raises(ValueError, match="op must be 'sum' or 'mean', not 'avg'"):
        P.reduce_tensor(sp.grad(0), op="avg")
    with pytest.raises(TypeError, match="needs a torch.Tensor, not float"):
        P.gather_tensor(0.5)
    with pytest.raises(ValueError, match=r"dst=1 is not a rank of this world of 1 \(ranks 0 to 0\)"):
        P.gather_tensor(sp.grad(0), dst=1)
    with pytest.raises(ValueError, match="src=2 is not a rank"):
        P.broadcast_object(None, src=2)
    with pytest.raises(TypeError, match="src must be a rank number, not '0'"):
        P.broadcast_tensor(sp.grad(0), src="0")


# ---- 4 ranks --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ranks():
    """One launch for every multi-rank check below (each launch costs about 1.5 s here); the `clean` fixture's
    checks by hand, since that fixture lives per test."""
    dirs = sandbox_dirs()
    res = launch(sp.everything, world_size=WORLD)
    assert leftovers() == [] and sandbox_dirs() - dirs == set() and listening_ports() == set()
    assert res.ok, (res.verdict, res.diagnosis.summary, [r.error for r in res.ranks])
    return res.values


def test_who_is_who(ranks):
    assert [v["who"] for v in ranks] == [(True, r, WORLD, r == 0, "cpu") for r in range(WORLD)]


def test_reduce_matches_one_process(ranks):
    total = sum(sp.grad(r) for r in range(WORLD))
    for v in ranks:
        # float32 sums in another order than ours: assert_close's float32 tolerance (rtol 1.3e-6) covers it
        assert_close(v["sum"], total)
        assert_close(v["mean"], total / WORLD)
        assert_close(v["default_op"], total / WORLD)  # the default op is the mean
        assert v["int_sum"].dtype == torch.int64 and torch.equal(v["int_sum"], sum(sp.counts(r) for r in range(WORLD)))
        assert v["input_untouched"]


def test_gather_matches_one_process(ranks):
    assert [v["gather"] is None for v in ranks] == [True, False, True, True]  # only dst=1 receives
    assert_close(ranks[1]["gather"], [sp.grad(r) for r in range(WORLD)])


def test_gather_of_uneven_shapes_gives_each_rank_its_own_shape(ranks):
    assert [v["uneven"] is None for v in ranks] == [False, True, True, True]
    want = [sp.uneven(r) for r in range(WORLD)]  # shapes (), (3,), (2, 2), (0,)
    assert [tuple(t.shape) for t in ranks[0]["uneven"]] == sp.UNEVEN_SHAPES[:WORLD]
    assert_close(ranks[0]["uneven"], want)
    assert_close(ranks[WORLD - 1]["scalars"], [torch.tensor(r * 0.5) for r in range(WORLD)])


def test_broadcast_fills_every_rank_in_place(ranks):
    for v in ranks:
        assert_close(v["bcast"], sp.grad(2))
        assert v["bcast_in_place"]
        assert_close(v["bcast_strided"], sp.grad(1).t())  # a non-contiguous buffer is filled too


def test_object_helpers(ranks):
    got = ranks[0]["gather_obj"]
    assert [g["rank"] for g in got] == list(range(WORLD))
    assert_close([g["t"] for g in got], [torch.full((2,), float(r)) for r in range(WORLD)])
    assert all(v["gather_obj"] is None for v in ranks[1:])
    assert all(v["bcast_obj"] == {"seed": 1234, "from": 3} for v in ranks)
    assert all(v["barrier"] is None for v in ranks)


REFUSALS = {  # what every rank must raise: (type, a part of the sentence)
    "mean_int": ("TypeError", "op='mean' needs a floating-point tensor and this one is int64 (the mean of integers is"
                              " not an integer); pass t.float(), or use op='sum' and divide"),
    "mean_bool": ("TypeError", "op='mean' needs a floating-point tensor and this one is bool"),
    "bad_op": ("ValueError", "op must be 'sum' or 'mean', not 'max'"),
    "not_tensor": ("TypeError", "reduce_tensor needs a torch.Tensor, not float"),
    "gather_dtypes": ("TypeError", "the ranks' tensors have different dtypes (ranks 0-2 have float32, rank 3 has "
                                   "float64)"),
    "gather_dst_disagree": ("ValueError", "the ranks disagree on dst (ranks 0, 1 and 3 dst=0; rank 2 dst=1)"),
    "dst_out_of_range": ("ValueError", "dst=4 is not a rank of this world of 4 (ranks 0 to 3)"),
    "dst_not_int": ("TypeError", "dst must be a rank number, not True"),
    "bcast_shape": ("ValueError", "rank 0 sends shape [] float32, but ranks 1-3 receive into shape [1] float32; every "
                                  "rank must pass a buffer of the sender's shape and dtype, e.g. "
                                  "torch.zeros([], dtype=torch.float32)"),
    "bcast_dtype": ("ValueError", "rank 0 sends shape [1] int64, but ranks 1-3 receive into shape [1] float32"),
    "bcast_src_disagree": ("ValueError", "the ranks disagree on src (ranks 0 and 2 src=0; ranks 1 and 3 src=1)"),
    "obj_src_out_of_range": ("ValueError", "src=-1 is not a rank of this world of 4"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_every_rank_refuses_the_pitfall_with_one_sentence(ranks, case):
    kind, words = REFUSALS[case]
    seen = [v["errors"][case] for v in ranks]
    assert seen[0] is not None and seen[0][0] == kind and words in seen[0][1], seen[0]
    assert seen == [seen[0]] * WORLD  # the same error on every rank: nobody is left waiting


def test_after_the_refusals_the_ranks_are_still_in_step(ranks):
    assert all(torch.equal(v["still_in_step"], torch.full((1,), float(WORLD))) for v in ranks)


def test_barrier_on_the_main_rank_only_is_a_hang(clean):
    res = launch(sp.barrier_on_main_only, world_size=WORLD)
    assert (res.verdict, res.diagnosis.kind) == ("hang", "collective_mismatch"), res.diagnosis.summary
    assert [r.pending["op"] for r in res.ranks] == ["barrier"] + ["all_reduce"] * (WORLD - 1)
    print(res.diagnosis.summary)
