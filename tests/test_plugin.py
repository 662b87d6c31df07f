"""The pytest plugin (sandbox/pytest_plugin.py), used by this suite as a project would use it: the marked tests'
bodies run on every sandbox rank. The pytester tests run a marked test file in a pytest of its own, to show how a
hang, a failing rank and a contract warning fail there."""
import os
import socket

import pytest
import torch
import torch.distributed as dist

pytest_plugins = ["pytester"]


@pytest.mark.sandbox(world_size=4)
def test_all_reduce_sums_over_four_ranks():
    t = torch.ones(2) * dist.get_rank()
    dist.all_reduce(t)
    assert t.tolist() == [6.0, 6.0]


@pytest.mark.sandbox(3)
def test_fixture_values_reach_every_rank(tmp_path):
    (tmp_path / f"rank-{dist.get_rank()}").write_text("here")
    dist.barrier()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-0", "rank-1", "rank-2"]


@pytest.mark.sandbox(nnodes=2, nproc_per_node=2)
def test_two_nodes_of_two_ranks_each(two_nodes):
    seen = [None] * dist.get_world_size()
    dist.all_gather_object(seen, (socket.gethostname(), os.environ["LOCAL_RANK"], os.environ["NODE_RANK"]))
    # ranks 0-1 on node0, 2-3 on node1, local ranks 0-1 on each: every rank sees the whole picture
    assert seen == [("node0", "0", "0"), ("node0", "1", "0"), ("node1", "0", "1"), ("node1", "1", "1")]


INNER = '''
import pytest
import torch
import torch.distributed as dist


@pytest.mark.sandbox(world_size=4)
def test_mismatch():
    t = torch.ones(2)
    if dist.get_rank() == 2:
        dist.broadcast(t, src=0)
    else:
        dist.all_reduce(t)


@pytest.mark.sandbox(world_size=2)
def test_rank_one_is_wrong():
    assert dist.get_rank() == 0, "only rank 0 may be here"


@pytest.mark.sandbox(world_size=2, init=False)
def test_leaves_the_group():
    dist.init_process_group("gloo")
    dist.barrier()


@pytest.mark.sandbox(world_size=4)
def test_every_rank_asserts():
    t = torch.ones(1) * dist.get_rank()
    dist.all_reduce(t)
    assert t.item() == 4.0


def _needs_five(x):
    assert x == 5


class TestInAClass:
    @pytest.mark.sandbox(world_size=2)
    def test_helper_asserts(self):
        _needs_five(dist.get_rank() + 10)


@pytest.mark.sandbox(world_size=2, colour="red")
def test_bad_option():
    pass


@pytest.mark.sandbox(world_size=4, nnodes=2)
def test_world_size_with_nodes():
    pass
'''


def test_failures_carry_the_sandbox_s_diagnosis(pytester):
    pytester.makepyfile(test_inner=INNER)
    r = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-rN")  # -rN: no summary repeating headlines
    r.assert_outcomes(passed=1, failed=6)
    out = r.stdout.str()
    assert out.count("HANG [collective_mismatch]: 4 ranks") == 1, out  # the headline once, as "sandbox: HANG ..."
    assert "sandbox: HANG [collective_mismatch]: 4 ranks" in out
    assert "ranks 0, 1 and 3 call all_reduce" in out and "rank 2 calls broadcast" in out
    assert "sandbox: ERROR [rank_error]: 2 ranks" in out and "AssertionError: only rank 0 may be here" in out
    assert "@pytest.mark.sandbox takes world_size and" in out and "colour" in out
    assert "world_size is the number of ranks on one node: with nnodes give nproc_per_node instead." in out
    # pytest's assertion introspection, on every rank: the ranks run the test file as pytest rewrote it
    assert out.count("ERROR [rank_error]: 4 ranks") == 1, out
    for rank in range(4):
        assert f"[rank {rank}] AssertionError: assert 6.0 == 4.0" in out, out
    assert "[rank 0] AssertionError: assert 10 == 5" in out and "[rank 1] AssertionError: assert 11 == 5" in out
    assert f"{os.sep}sandbox{os.sep}" not in out  # no frame of the sandbox's own in a traceback


def test_strict_fails_a_run_that_broke_a_contract(pytester):
    pytester.makepyfile(test_inner=INNER)
    r = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "--sandbox-strict", "-k", "leaves")
    r.assert_outcomes(failed=1)
    out = r.stdout.str()
    assert "the run finished but broke a contract (1 warning)" in out and "Warning [not_destroyed]" in out
