"""The judge's vocabularies, each held by a list written out here (never read back from the code it checks): the
names that make an `if` rank-dependent, the op families of sandbox.calls, the collectives after which every rank
holds the same value, the backend's names for ops, the errors that only say a peer went away; and the words that
say which way a rank went at a rank-dependent `if`. Small source files and call dicts only: no ranks, no torch."""
import textwrap

import pytest

from sandbox import branches, calls, flight, words
from sandbox.diagnose import diagnose_hang, origins
from sandbox.events import RankTrack
from sandbox.lab import rules


def _source(tmp_path, src: str) -> tuple[str, int]:
    """(path, line of the `# CALL` marker) of a small source file."""
    text = textwrap.dedent(src)
    path = tmp_path / f"m{abs(hash(text))}.py"
    path.write_text(text)
    return str(path), next(i for i, t in enumerate(text.splitlines(), 1) if "# CALL" in t)


# ------------------------------------------------------------------------------------------ "which rank am I" in a test

RANK_DEPENDENT = ["rank == 0", "dist.get_rank() == 0", "args.local_rank == 0", "self.global_rank == 0",
                  "node_rank == 0", "get_local_rank() == 0", 'os.environ["RANK"] == "0"',
                  'int(os.environ["LOCAL_RANK"]) == 0', "is_main_process()", "accelerator.is_main_process",
                  "state.is_local_main_process", "self.is_main", "is_master", "utils.is_rank_zero()", "is_rank_0()",
                  "rank_zero", "rank0", "is_primary()", "main_process", "trainer.is_global_zero",
                  "dist.get_rank() != 0 and step > 3", "not is_main_process()"]
NOT_RANK_DEPENDENT = ["ranking", "self.rank_loss > 0", "prank", "len(ranks) > 2", "is_main_branch", "world_size > 1",
                      "step % 10 == 0", "franks == 2"]


@pytest.mark.parametrize("test", RANK_DEPENDENT)
def test_a_name_that_says_which_rank_makes_the_if_rank_dependent(tmp_path, test):
    path, line = _source(tmp_path, f"""\
        import torch.distributed as dist
        def f(x):
            if {test}:
                dist.barrier()  # CALL
        """)
    assert branches.rank_branch([(path, line)]) == {"test": test, "site": f"{path}:3", "taken": "if"}


@pytest.mark.parametrize("test", NOT_RANK_DEPENDENT)
def test_a_name_that_only_looks_like_one_does_not(tmp_path, test):
    path, line = _source(tmp_path, f"""\
        import torch.distributed as dist
        def f(x):
            if {test}:
                dist.barrier()  # CALL
        """)
    assert branches.rank_branch([(path, line)]) is None


# ------------------------------------------------------------------------------------------ the if, and its else

MISMATCH = """\
import torch.distributed as dist
def f(rank, t):
    if rank == 2:
        dist.broadcast(t, src=0)  # CALL
    {rest}
        dist.all_reduce(t)
"""


def _mismatch(tmp_path, rest: str, odd: int = 2, odd_line: int = 4, others_line: int = 6):
    """Rank `odd` in a broadcast at `odd_line` of MISMATCH, the others of 4 in an all_reduce at `others_line`."""
    path = tmp_path / f"m{abs(hash(rest))}_{odd_line}.py"
    path.write_text(MISMATCH.format(rest=rest))
    tracks = {}
    for r in range(4):
        call = ({"op": "broadcast", "root": 0, "line": odd_line} if r == odd else
                {"op": "all_reduce", "redop": "SUM", "line": others_line})
        t = tracks[r] = RankTrack(r)
        t.feed({"ev": "hello", "rank": r, "world_size": 4, "t": 0.0})
        t.feed({"ev": "enter", "rank": r, "id": 1, "t": 1.0, "gname": "0", "group": [0, 1, 2, 3], "seq": 1,
                "shapes": [[4]], "dtypes": ["float32"], "site": f"{path}:{call.pop('line')}", **call})
    return diagnose_hang(tracks), str(path)


def test_a_rank_through_the_if_and_the_ranks_through_its_else(tmp_path):
    d, path = _mismatch(tmp_path, "else:")
    assert (d.kind, d.culprit_ranks) == ("collective_mismatch", [2]), d.summary
    assert (f"Rank 2 reached broadcast(shape [4], float32, root 0) at {path}:4 through `if rank == 2:` at {path}:3;"
            " ranks 0, 1 and 3 took its else.") in d.summary, d.summary


def test_ranks_that_did_not_go_through_the_if_skipped_it(tmp_path):
    d, path = _mismatch(tmp_path, "if True:", others_line=6)
    assert f"through `if rank == 2:` at {path}:3; ranks 0, 1 and 3 skipped it." in d.summary, d.summary


def test_a_call_in_the_else_is_said_to_be_reached_through_the_else(tmp_path):
    """Ranks 0, 1 and 3 in the broadcast of the else, rank 2 in the all_reduce of the if."""
    path = tmp_path / "swapped.py"
    path.write_text(MISMATCH.format(rest="else:"))
    b = branches.rank_branch([(str(path), 6)])
    assert b == {"test": "rank == 2", "site": f"{path}:3", "taken": "else"}
    assert branches.through(b) == f"through the else of `if rank == 2:` at {path}:3"
    assert branches.through(dict(b, taken="if")) == f"through `if rank == 2:` at {path}:3"


# ------------------------------------------------------------------------------------------ op families

def test_the_op_families_are_the_ones_torch_distributed_has():
    assert calls.COLLECTIVES == {
        "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_single",
        "all_gather_coalesced", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all",
        "all_to_all_single", "broadcast", "reduce", "gather", "scatter", "barrier", "monitored_barrier",
        "all_gather_object", "gather_object", "broadcast_object_list", "scatter_object_list"}
    assert {n for n, o in calls.OPS.items() if o.kind == "p2p"} == {
        "send", "recv", "isend", "irecv", "send_object_list", "recv_object_list", "batch_isend_irecv"}
    assert {n: o.kind for n, o in calls.OPS.items() if o.kind not in ("coll", "p2p")} == {
        "init_process_group": "init", "new_group": "new_group", "new_subgroups": "local",
        "new_subgroups_by_enumeration": "local", "destroy_process_group": "local"}
    assert {n for n, o in calls.OPS.items() if o.returns_work} == {"isend", "irecv", "batch_isend_irecv"}
    assert {n: (o.root, o.default_root) for n, o in calls.OPS.items() if o.root} == {
        "broadcast": ("src", None), "reduce": ("dst", None), "gather": ("dst", None), "scatter": ("src", None),
        "gather_object": ("dst", 0), "broadcast_object_list": ("src", 0), "scatter_object_list": ("src", 0),
        "send": ("dst", None), "recv": ("src", None), "isend": ("dst", None), "irecv": ("src", None),
        "send_object_list": ("dst", None), "recv_object_list": ("src", None)}
    # the lab's "calls that move data": every collective but the barriers, every point-to-point op
    assert rules.MOVES == calls.COLLECTIVES - {"barrier", "monitored_barrier"} | {
        "send", "recv", "isend", "irecv", "send_object_list", "recv_object_list", "batch_isend_irecv"}


def test_the_backends_names_for_ops_are_ops_the_sandbox_knows():
    """The Flight Recorder says `allreduce`, `_allgather_base`, ...: each is read as an op of the call contract."""
    assert set(flight._ALIASES.values()) <= set(calls.OPS), set(flight._ALIASES.values()) - set(calls.OPS)
    for backend, op in {"allreduce": "all_reduce", "allgather": "all_gather", "alltoall_base": "all_to_all_single",
                        "_reduce_scatter_base": "reduce_scatter_tensor", "all_reduce_barrier": "barrier",
                        "_allgather_base": "all_gather_into_tensor"}.items():
        assert flight._op(f"gloo:{backend}") == op and flight._op(f"nccl:{backend}") == op


SAME_ON_EVERY_RANK = ["all_reduce", "all_reduce_coalesced", "broadcast", "broadcast_object_list", "all_gather",
                      "all_gather_into_tensor", "all_gather_single", "all_gather_coalesced", "all_gather_object"]
EACH_ITS_OWN = ["reduce", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all",
                "all_to_all_single", "gather", "scatter", "gather_object", "scatter_object_list", "recv"]


@pytest.mark.parametrize("op", SAME_ON_EVERY_RANK + EACH_ITS_OWN)
def test_a_value_is_synced_by_the_collectives_that_leave_it_the_same_on_every_rank(tmp_path, op):
    """`n` goes first into `op`; an `if` on it after the call is data-dependent unless that op left the same value
    on every rank (an all_gather_single's output, not a reduce_scatter's shard)."""
    path, line = _source(tmp_path, f"""\
        import torch
        import torch.distributed as dist
        def f(x):
            n = load()
            dist.{op}(n, x)
            if n.sum() > 0:
                dist.all_reduce(x)  # CALL
        """)
    b = origins.data_branch([(path, line)])
    assert (b is None) == (op in SAME_ON_EVERY_RANK), b


def test_every_collective_that_moves_data_is_one_or_the_other():
    assert set(SAME_ON_EVERY_RANK) | set(EACH_ITS_OWN) - {"recv"} == calls.COLLECTIVES - {"barrier",
                                                                                          "monitored_barrier"}


# ------------------------------------------------------------------------------------------ a peer went away

@pytest.mark.parametrize("message, lost", [
    ("[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:8612", True),
    ("[../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:18343: Connection reset by peer",
     True),
    ("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 2000ms for recv operation",
     True),
    ("Broken pipe", True),
    ("Expected all tensors to be on the same device, but found at least two devices", False),
    ("Expected to have finished reduction in the prior iteration before starting a new one", False),
    ("op.preamble.length <= op.nbytes. 8 vs 4. Received data size doesn't match expected size", False),
])
def test_an_error_that_only_says_a_peer_went_away_is_told_from_one_that_is_the_cause(message, lost):
    assert words.peer_lost(message) is lost
