"""The checks of labs 16-18 (fsdp-wrap-differs, moe-all-to-all-splits, checkpoint-timeout) tell a right fix from
a wrong one: each accepts the catalogue's reference fix and rejects the broken code and one wrong fix that people
really try:

- FSDP wrapping: keep the per-node threshold but round it ("the thresholds are close enough"): 100 and 200 stay
  apart, the ranks still shard different blocks.
- MoE dispatch: exchange the counts with all_gather instead of all_to_all, but still send with the counts taken
  before the capacity step: the receivers learn the right counts, the sender still sends the stale ones.
- Checkpoint: raise the default group's timeout on rank 0 only (the rank that saves): the ranks that wait keep
  their short timeout and still time out.

Also the rules behind those labs' diagnoses, on hand-built tracks (no ranks started): a rank busy in its own code
while its peers time out at a collective is named as the cause (`busy_at_timeout`), and a collective mismatch in
FSDP's own calls is said in FSDP's terms (`fsdp_words`).

The wrong fixes are run as the labs' exercises define them (`lab_function`), so an exercise cannot drift from what
its hidden answer says.
"""
import concurrent.futures
import importlib.util
import os
import threading

import pytest

from sandbox.diagnose.failure import diagnose_failure
from sandbox.diagnose.hang import busy_at_timeout, user_frames
from sandbox.diagnose.sharding import fsdp_words
from sandbox.events import RankTrack
from sandbox.result import Diagnosis
from test_lab_fixes_ddp import lab_function


# ----------------------------------------------------------------------------------------------- wrong fixes
# each lab's exercise that holds a wrong fix: (notebook, function)
WRONG = {
    # the per-node threshold rounded to the nearest hundred: 100 and 200 stay apart
    "fsdp-wrap-differs": ("16_fsdp_wrap_differs", "rounded_threshold"),
    # the counts exchanged with all_gather (the receivers learn the right ones), the send splits still stale
    "moe-all-to-all-splits": ("17_moe_all_to_all_splits", "counts_all_gathered_stale_send"),
    # a long timeout on rank 0 only, the rank that saves: the ranks that wait keep the short one
    "checkpoint-timeout": ("18_checkpoint_timeout", "long_timeout_on_rank_0_only"),
}


@pytest.mark.parametrize("slug, verdicts", [
    ("fsdp-wrap-differs", ("crash", "hang")),
    ("moe-all-to-all-splits", ("crash", "hang", "error")),
    ("checkpoint-timeout", ("error",)),
])
def test_the_check_accepts_the_reference_and_rejects_the_broken_code_and_a_wrong_fix(slug, verdicts, clean):
    from sandbox import lab

    b = lab.Lab(slug)
    # the three runs at once: their ranks mostly wait (a save that outlasts a timeout, a hang named), and each run
    # has its own store and ranks, so they do not see each other
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        right, broken, tried = pool.map(lambda f: b.check(f, show=False),
                                        [b.module.fixed, b.module.broken, lab_function(*WRONG[slug])])
    assert right.ok and right.verdict == "right", right
    assert not right.result.warnings, right.result.warnings  # the reference fix breaks no contract
    assert not broken.ok and broken.verdict in verdicts, broken
    assert f"[{b.bug.broken.kind}]" in broken.result.headline(), broken.result.headline()
    assert broken.result.diagnosis.culprit_ranks == b.bug.broken.culprits, broken.result.diagnosis.summary
    assert not tried.ok and tried.verdict in verdicts, tried
    assert tried.result.diagnosis.kind == b.bug.broken.kind, tried.result.diagnosis.summary


# ----------------------------------------------------------------------------------------------- the rules

# a faulthandler dump: a helper thread in the standard library and torch, then the main thread in the user's code
STACK = f"""Thread 0x00007f (most recent call first):
  File "{threading.__file__}", line 331 in wait
  File "{os.path.join(importlib.util.find_spec("torch").submodule_search_locations[0], "distributed", "x.py")}", line 5 in f

Current thread 0x00007e (most recent call first):
  File "/work/job/train.py", line 31 in slow_save
  File "/work/job/train.py", line 52 in main
  File "/work/job/train.py", line 60 in <module>
"""
TIMEOUT_MSG = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting"
               " 2000ms for recv operation to complete")
BARRIER = {"op": "barrier", "gname": "0", "group": [0, 1, 2], "seq": 2}


def _hello(rank):
    t = RankTrack(rank)
    t.feed({"ev": "hello", "rank": rank, "world_size": 3, "t": 0.0})
    t.feed({"ev": "enter", "rank": rank, "id": 1, "t": 0.5, "site": "train.py:40", "op": "all_reduce", "gname": "0",
            "group": [0, 1, 2], "seq": 1, "shapes": [[4]], "dtypes": ["float32"]})
    t.feed({"ev": "exit", "rank": rank, "id": 1, "t": 0.6, "op": "all_reduce"})
    return t


def _timed_out(rank, enter_t=1.0, fail_t=3.0):
    t = _hello(rank)
    t.feed({"ev": "enter", "rank": rank, "id": 2, "t": enter_t, "site": "train.py:53", **BARRIER})
    t.feed({"ev": "exit", "rank": rank, "id": 2, "t": fail_t, "op": "barrier",
            "error": f"RuntimeError: {TIMEOUT_MSG}"})
    t.feed({"ev": "end", "rank": rank, "t": fail_t + 0.01, "outcome": "error",
            "error": {"type": "RuntimeError", "message": TIMEOUT_MSG, "site": "train.py:53", "traceback": ""}})
    return t


def test_user_frames_skip_torch_and_other_threads():
    assert user_frames(STACK)[:2] == ["/work/job/train.py:31 (in slow_save)", "/work/job/train.py:52 (in main)"]


def test_a_rank_busy_while_its_peers_time_out_is_the_cause():
    saver = _hello(0)
    saver.stack = STACK  # still in its own code when the run was stopped
    tracks = {0: saver, 1: _timed_out(1), 2: _timed_out(2)}
    outcomes = {0: "stopped", 1: "error", 2: "error"}
    d = diagnose_failure(tracks, outcomes)
    assert (d.kind, d.culprit_ranks, d.op) == ("straggler", [0], "barrier"), d.summary
    assert "train.py:31 (in slow_save), called from /work/job/train.py:52 (in main)" in d.summary
    assert "Timed out waiting 2000ms" in d.summary and "ranks 1 and 2 timed out" in d.summary
    assert "lost its connection" not in d.summary  # the waiting ranks are victims, not told as peers that lost one


def test_a_rank_that_arrived_late_is_named_from_its_calls():
    """No stack of the busy time (it reached the barrier after the others gave up): its calls around the timeout."""
    late = _hello(0)
    late.feed({"ev": "enter", "rank": 0, "id": 2, "t": 4.5, "site": "train.py:53", **BARRIER})
    tracks = {0: late, 1: _timed_out(1), 2: _timed_out(2)}
    d = busy_at_timeout(tracks, {0: "stopped", 1: "error", 2: "error"})
    assert d is not None and d.culprit_ranks == [0], d
    assert "after all_reduce" in d.summary and "1.5 s later" in d.summary, d.summary


def test_ranks_that_all_wait_in_calls_are_not_stragglers():
    """The twin: rank 0 was inside another call when its peers timed out (a mismatch or a deadlock, not a slow
    rank): this rule stays silent."""
    other = _hello(0)
    other.feed({"ev": "enter", "rank": 0, "id": 2, "t": 0.9, "site": "train.py:70", "op": "recv", "peer": 1})
    tracks = {0: other, 1: _timed_out(1), 2: _timed_out(2)}
    assert busy_at_timeout(tracks, {0: "stopped", 1: "error", 2: "error"}) is None


def _mismatch(op):
    return Diagnosis(kind="collective_mismatch", cause="Collective mismatch at call #1.", culprit_ranks=[1], op=op,
                     details={"calls": {"0": "x", "1": "y"}})


def _failed(rank, traceback):
    t = RankTrack(rank)
    t.feed({"ev": "end", "rank": rank, "t": 1.0, "outcome": "error",
            "error": {"type": "RuntimeError", "message": "Connection reset by peer", "traceback": traceback}})
    return t


def test_an_fsdp_call_is_said_in_fsdp_terms():
    t0 = RankTrack(0)
    t1 = _failed(1, 'File "/v/lib/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", line 3, in foreach_all_gather')
    d = fsdp_words(_mismatch("all_gather_single"), {0: t0, 1: t1})
    assert "FSDP's" in d.summary and "fully_shard" in d.summary and "all_gather" in d.summary, d.summary
    scatter = fsdp_words(_mismatch("reduce_scatter_single"), {0: t0, 1: t1})
    assert "reduce_scatter of one fully_shard group's gradients" in scatter.summary


def test_a_plain_all_gather_is_not_called_fsdp():
    """The twin: the same mismatch with no FSDP frame on any rank is left as it was."""
    t0, t1 = RankTrack(0), _failed(1, 'File "/job/train.py", line 3, in main')
    d = _mismatch("all_gather_single")
    assert fsdp_words(d, {0: t0, 1: t1}) == d


def _crashed_inside(rank, device):
    """A rank that died inside an asynchronous all_reduce's wait (no error record: the process was aborted)."""
    t = _hello(rank)
    t.feed({"ev": "enter", "rank": rank, "id": 2, "t": 1.0, "site": "train.py:70", "op": "all_reduce", "gname": "0",
            "group": [0, 1, 2], "seq": 2, "shapes": [[68]], "dtypes": ["float32"], "devices": [device],
            "async": True})
    t.feed({"ev": "exit", "rank": rank, "id": 2, "t": 1.01, "op": "all_reduce"})
    t.feed({"ev": "enter", "rank": rank, "id": 3, "t": 1.02, "site": "train.py:71", "op": "wait", "of": "all_reduce",
            "of_id": 2, "gname": "0", "group": [0, 1, 2], "seq": 2, "shapes": [[68]], "dtypes": ["float32"]})
    t.exit_t = 3.0
    return t


@pytest.mark.parametrize("device, straggler", [("cuda:2", True), ("cpu", False)])
def test_a_crash_inside_a_collective_is_a_timeout_only_on_nccl(device, straggler):
    """NCCL's watchdog aborts a process whose collective timed out, so a crash inside one, with a peer busy in its
    own code, is that peer's slowness. Gloo aborts at once on a mismatch (a bucket of another size): no timeout,
    and no straggler to blame (a real run was told 'the process was aborted: NCCL's watchdog' on gloo)."""
    tracks = {0: _hello(0), 1: _hello(1), 2: _crashed_inside(2, device)}
    tracks[0].stack = STACK
    d = busy_at_timeout(tracks, {0: "stopped", 1: "stopped", 2: "crashed"})
    assert (d is not None and d.kind == "straggler") == straggler, d
