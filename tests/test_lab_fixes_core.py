"""The checks of labs 01-09 (the core bugs) cannot be fooled, and their exercises' checks tell the answer from a
wrong attempt. With real gloo ranks, as the labs run them:

- lab 07 (aux-data): the shortcut where every rank reads block 0 (which holds the metadata) and nothing is
  communicated returns the reference's values, yet is not right: it breaks the lab's rule that a rank reads only
  its own slice of the pool; reading the own block but taking the values from a constant breaks the other rule
  (the ranks communicate the metadata); syncing only on the ranks that read zeros (a data-guarded collective)
  fails; syncing with SUM is a wrong answer; the reference fix is right;
- lab 04 (kv-sync): an exchange whose isends are never waited on delivers the right cache, yet breaks a contract
  and is not right unless the learner asks for leniency; one batch_isend_irecv waited on in full is right; the
  exercises' ring and parity orders hang as the lab says;
- the other labs' exercise checks: each accepts its answer and rejects a wrong attempt.
"""
import datetime
import os

import pytest

from sandbox import lab

pytestmark = pytest.mark.usefixtures("clean")


# ------------------------------------------------------------------------------------------- lab 07: aux-data

def _language(read_block0=False, sync=None, guarded=False, constant=False):
    """Lab 07's language side as a learner writes it: which block each rank reads, and how the metadata is synced
    (None: not at all; "max"/"sum": an all_reduce of that op; `guarded`: only on ranks that read zeros)."""
    import torch
    import torch.distributed as dist

    from sandbox.bugs.aux_data import BLOCKS, PROMPT_TOKENS, SUCCESS, TP, embedding_side
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    tp = dist.get_rank()
    group = dist.new_group(list(range(dist.get_world_size())), backend="gloo")
    pool = embedding_side()
    block = 0 if read_block0 else tp * (BLOCKS // TP)
    sent_tokens, actual_total_length = (int(v) for v in pool[block])
    if constant:  # the values taken from what the sender is known to send, not from the pool or a peer
        sent_tokens = actual_total_length = PROMPT_TOKENS
    if sync and (sent_tokens == 0 or not guarded):
        meta = torch.tensor([sent_tokens, actual_total_length])
        dist.all_reduce(meta, op={"max": dist.ReduceOp.MAX, "sum": dist.ReduceOp.SUM}[sync], group=group)
        sent_tokens, actual_total_length = (int(v) for v in meta)
    for _ in range(3):
        status = torch.tensor([SUCCESS])
        dist.all_reduce(status, op=dist.ReduceOp.MIN, group=group)
        if status.item() == SUCCESS and 0 < actual_total_length <= sent_tokens:
            break
    token = torch.tensor([actual_total_length * 7 % 101])
    tokens = [torch.zeros(1, dtype=token.dtype) for _ in range(dist.get_world_size())]
    dist.all_gather(tokens, token, group=group)
    dist.destroy_process_group()
    return {"sent_tokens": sent_tokens, "actual_total_length": actual_total_length,
            "first_tokens": [t.item() for t in tokens]}


def every_rank_reads_block_0():
    return _language(read_block0=True)


def own_block_and_a_constant():
    return _language(constant=True)


def synced_where_missing():
    return _language(sync="max", guarded=True)


def synced_with_sum():
    return _language(sync="sum")


def synced_with_max():
    return _language(sync="max")


def test_lab_07_rejects_the_no_communication_shortcut_by_its_rule():
    b = lab.Lab("aux-data")
    c = b.check(every_rank_reads_block_0, show=False)
    assert not c.ok and c.verdict == "rule", c
    assert "a rank reads only its own slice of the block pool" in c.message, c.message
    assert "rank 1 read block 0 (its slice is blocks 8-15)" in c.message, c.message
    assert "rank 0 read" not in c.message, c.message  # block 0 is rank 0's own


def test_lab_07_rejects_values_that_no_rank_communicated():
    c = lab.Lab("aux-data").check(own_block_and_a_constant, show=False)
    assert not c.ok and c.verdict == "rule", c
    assert "the ranks must communicate the metadata" in c.message, c.message


def test_lab_07_rejects_the_data_guarded_sync_and_sum_and_accepts_the_fixes():
    b = lab.Lab("aux-data")
    guarded = b.check(synced_where_missing, show=False)
    assert not guarded.ok and guarded.verdict in ("hang", "crash"), guarded
    assert guarded.result.diagnosis.kind == "collective_mismatch", guarded
    summed = b.check(synced_with_sum, show=False)
    assert not summed.ok and summed.verdict == "wrong", summed
    assert "['sent_tokens'] is 74, the single-process reference has 37" in summed.message, summed.message
    for right in (synced_with_max, b.module.fixed):
        c = b.check(right, show=False)
        assert c.ok and c.verdict == "right", (right.__name__, c)


def test_lab_07_rule_reads_the_blocks_each_rank_read():
    """The rule at unit level: from notes as a run records them, without ranks."""
    from sandbox.bugs.aux_data import _reads_outside_own_slice

    class Res:
        world_size = 4
        events = [{"ev": "note", "rank": r, "fields": {"read_block": b}} for r, b in ((0, 0), (1, 8), (2, 16))]

    assert _reads_outside_own_slice(Res) == "rank 3 read no block of the pool"
    Res.events = Res.events + [{"ev": "note", "rank": 3, "fields": {"read_block": b}} for b in (24, 31, 0, 16)]
    assert _reads_outside_own_slice(Res) == "rank 3 read blocks 0, 16 (its slice is blocks 24-31)"
    Res.events = Res.events[:3] + [{"ev": "note", "rank": 3, "fields": {"read_block": 24}}]
    assert _reads_outside_own_slice(Res) is None


# ------------------------------------------------------------------------------------------- lab 04: kv-sync

def _exchange(mode):
    """Lab 04's cache exchange, posted first: "batch" (one batch_isend_irecv, every request waited on) or
    "unwaited" (isend every layer, irecv and wait on the receives only: the sends are never waited on)."""
    import torch.distributed as dist

    from sandbox.bugs.kv_sync import PROMPT, _buffers, _setup, decode, prefill
    model, rank, world, own, mine = _setup()
    cache, first = prefill(model, rank, world, mine)
    sends, recvs, incoming = [], [], []
    for p in range(world):
        if p == rank:
            continue
        for layer in mine:
            sends += [dist.P2POp(dist.isend, cache[layer][0], p), dist.P2POp(dist.isend, cache[layer][1], p)]
        for layer in [la for la, o in own.items() if o == p]:
            k, v = _buffers(model, len(PROMPT))
            recvs += [dist.P2POp(dist.irecv, k, p), dist.P2POp(dist.irecv, v, p)]
            incoming.append((layer, k, v))
    if mode == "batch":
        for work in dist.batch_isend_irecv(sends + recvs):
            work.wait()
    else:
        for op in sends:
            dist.isend(op.tensor, dst=op.peer)  # posted, never waited on
        for work in [dist.irecv(op.tensor, src=op.peer) for op in recvs]:
            work.wait()
    for layer, k, v in incoming:
        cache[layer] = (k, v)
    tokens = decode(model, cache, first)
    if mode != "batch":
        # every rank has received all it was sent before any tears its group down: without this, a rank done early
        # destroys its group while its unwaited isends still feed a slower peer, which then fails with "Connection
        # closed by peer" (seen under load); with it the run finishes, its values right and its contract broken
        dist.barrier()
    dist.destroy_process_group()
    return {"pairwise": tokens, "ring": tokens}


def exchange_batched():
    return _exchange("batch")


def exchange_isend_unwaited():
    return _exchange("unwaited")


def ring_send_first():
    """Lab 04's exercise 1: every rank sends its layers to its right neighbour, then receives from its left."""
    import torch.distributed as dist

    from sandbox.bugs.kv_sync import PROMPT, _buffers, _setup, prefill
    model, rank, world, own, mine = _setup()
    cache, _ = prefill(model, rank, world, mine)
    right, left = (rank + 1) % world, (rank - 1) % world
    for layer in mine:
        dist.send(cache[layer][0], dst=right)
        dist.send(cache[layer][1], dst=right)
    for _ in [la for la, o in own.items() if o == left]:
        k, v = _buffers(model, len(PROMPT))
        dist.recv(k, src=left)
        dist.recv(v, src=left)
    dist.destroy_process_group()


def test_lab_04_rejects_an_unwaited_isend_unless_lenient():
    b = lab.Lab("kv-sync")
    strict = b.check(exchange_isend_unwaited, show=False)
    assert not strict.ok and strict.verdict == "contract", strict
    assert "matches the single-process reference" in strict.message, strict.message  # the values were right
    assert "async_unwaited" in strict.message and "lenient=True" in strict.message, strict.message
    lenient = b.check(exchange_isend_unwaited, lenient=True, show=False)
    assert lenient.ok and lenient.verdict == "right", lenient
    assert "async_unwaited" in lenient.message, lenient.message  # accepted, and still named


def test_lab_04_accepts_batch_isend_irecv_and_the_reference():
    b = lab.Lab("kv-sync")
    for right in (exchange_batched, b.module.fixed):
        c = b.check(right, show=False)
        assert c.ok and c.verdict == "right", (right.__name__, c)
    broken = b.check(b.module.broken, show=False)
    assert not broken.ok and broken.verdict == "hang", broken


def test_lab_04_ring_exercise_check_wants_the_cycle():
    # these functions import their init (kv_sync._setup) inside, where the check cannot see it: init=False says so
    said = lab.check(ring_send_first, n=3, expect="hang", kind="p2p_cycle", init=False, show=False)
    assert said.ok, said
    assert said.result.diagnosis.culprit_ranks == [0, 1, 2], said.result.diagnosis
    mis = lab.check(ring_send_first, n=3, expect="hang", kind="collective_mismatch", init=False, show=False)
    assert not mis.ok and "the sandbox names it p2p_cycle, not collective_mismatch" in mis.message, mis
    finished = lab.check(exchange_batched, n=3, expect="hang", kind="p2p_cycle", init=False, show=False)
    assert not finished.ok and finished.verdict == "right", finished


# ------------------------------------------------------------------------------------ the other labs' exercises

def world_size_five_on_rank_3():
    """Lab 01, exercise 1: every rank at env://, rank 3 with world_size=5."""
    import torch.distributed as dist
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=5 if rank == 3 else 4,
                            timeout=datetime.timedelta(seconds=60))
    dist.barrier()
    dist.destroy_process_group()


def one_more_group_on_rank_3():
    """Lab 03, exercise 2: one order on every rank, and one new_group more on rank 3."""
    import torch.distributed as dist

    from sandbox.bugs.group_order import groups, make
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    for name, stage in zip(("tp", "sp"), groups(world)):
        for ranks in stage:
            make(name, ranks)
    if rank == 3:
        dist.new_group([1, 3])
    dist.barrier()
    dist.destroy_process_group()


def early_stop_on_rank_0():
    """Lab 08, exercise 3: rank 0 alone breaks out of the loop; every rank then meets at a barrier."""
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    for step in range(10):
        loss = torch.tensor([1.0 / (step + 1) + 0.1 * rank])
        dist.all_reduce(loss)
        if rank == 0 and 1.0 / (step + 1) < 0.3:
            break
    dist.barrier()
    dist.destroy_process_group()
    return step


@pytest.mark.parametrize("fn, n, kind, culprits", [
    (world_size_five_on_rank_3, 4, "init_mismatch", [3]),
    (one_more_group_on_rank_3, 4, "group_mismatch", [3]),
    (early_stop_on_rank_0, 4, "collective_mismatch", [0]),
], ids=["lab01-world-size", "lab03-one-more-group", "lab08-early-stop"])
def test_a_make_it_hang_exercise_accepts_the_answer_and_rejects_a_wrong_prediction(fn, n, kind, culprits):
    right = lab.check(fn, n=n, expect="hang", kind=kind, culprits=culprits, show=False)
    assert right.ok and right.verdict == "hang", right
    wrong = lab.check(fn, n=n, expect="hang", kind=kind, culprits=[r + 1 for r in culprits], show=False)
    assert not wrong.ok and "its culprits are" in wrong.message, wrong


def gathered_as_objects():
    """Lab 06, exercise 1's answer: one all_gather_object of Python lists."""
    import torch.distributed as dist

    from sandbox.bugs.gather_uneven import items
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    out = [None] * world
    dist.all_gather_object(out, items(rank).tolist())
    dist.destroy_process_group()
    return out


def padded_by_guess():
    """Lab 06, exercise 2: padded to this rank's own length + 3, so the shapes still differ."""
    import torch
    import torch.distributed as dist

    from sandbox.bugs.gather_uneven import items
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = items(rank)
    padded = torch.zeros(len(mine) + 3)
    padded[:len(mine)] = mine
    out = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(out, padded)
    dist.destroy_process_group()
    return [t.tolist() for t in out]


def receiver_does_not_wait():
    """Lab 05, exercise 1: rank 1 reads its irecv's buffer without waiting on the request."""
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    if dist.get_rank() == 0:
        dist.isend(torch.arange(4, dtype=torch.float32), dst=1).wait()
        dist.destroy_process_group()
        return "sent"
    got = torch.empty(4)
    dist.irecv(got, src=0)
    return got.tolist()


def _cross_device_share(own_only):
    """Lab 09's exchange; with `own_only` exercise 1's slice: each rank stacks only its own samples."""
    import torch
    import torch.distributed as dist

    from sandbox.bugs.cross_device import generate, simulate
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    pool = [None] * world
    dist.all_gather_object(pool, generate(rank, device))
    pool = [s for per_rank in pool for s in per_rank]
    share = pool[rank * 2:(rank + 1) * 2] if own_only else pool[rank::world]
    with simulate.devices_checked():
        rewards = torch.stack([s["rewards"].to(device) for s in share])
    values = [s["rewards"].sim_data.tolist() for s in share]
    dist.destroy_process_group()
    return {"device": str(rewards.device), "shape": list(rewards.shape), "rewards": values}


def own_samples_only():
    return _cross_device_share(own_only=True)


@pytest.mark.parametrize("slug, fn, verdicts", [
    ("gather-uneven", gathered_as_objects, {"right"}),
    ("gather-uneven", padded_by_guess, {"hang", "crash"}),
    ("isend-unwaited", receiver_does_not_wait, {"wrong", "contract"}),
    ("cross-device", own_samples_only, {"wrong"}),
], ids=["lab06-objects", "lab06-padded-by-guess", "lab05-receiver-does-not-wait", "lab09-own-samples"])
def test_an_exercise_check_judges_the_attempt(slug, fn, verdicts):
    c = lab.Lab(slug).check(fn, show=False)
    assert c.verdict in verdicts and c.ok == (verdicts == {"right"}), c
