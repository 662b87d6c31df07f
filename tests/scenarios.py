"""Small rank programs for the tests: one per thing the sandbox must recognise. Each is a plain function the
ranks import; the process group is created by the function itself, as a user's code would."""
import datetime
import os
import signal
import time

import torch
import torch.distributed as dist


def _init(timeout=30):
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    return dist.get_rank(), dist.get_world_size()


def ok_sum(n=3):
    rank, ws = _init()
    t = torch.full((n,), float(rank + 1))
    dist.all_reduce(t)
    dist.destroy_process_group()
    return t.tolist()


def env_view():
    keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
            "TORCHELASTIC_RUN_ID", "ROLE_RANK"]
    return {k: os.environ.get(k) for k in keys}


def op_mismatch():
    rank, _ = _init()
    t = torch.ones(4)
    if rank == 1:
        dist.all_gather([torch.empty(4) for _ in range(dist.get_world_size())], t)  # BUG: the odd one out
    else:
        dist.all_reduce(t)


def shape_mismatch():
    rank, _ = _init()
    t = torch.ones(4 if rank != 2 else 6)  # BUG: rank 2 contributes a different size -> gloo aborts
    dist.all_reduce(t)
    dist.all_reduce(t)


def missing_rank():
    rank, ws = _init()
    t = torch.ones(2)
    if rank == 1:
        dist.recv(t, src=2)  # waits for a message rank 2 never sends: rank 1 never reaches the all_reduce
    dist.all_reduce(t)


def groups_cycle():
    rank, ws = _init()
    sub = dist.new_group([0, 1])
    t = torch.ones(2)
    if rank == 1:
        dist.barrier(group=sub)  # waits for rank 0, which waits for it in the world's all_reduce: a cycle
    dist.all_reduce(t)


def exits_early():
    rank, ws = _init()
    t = torch.ones(2)
    if rank == ws - 1:
        return "done early"  # BUG: skips the collective the others wait in
    dist.all_reduce(t)


def group_order():
    rank, ws = _init()
    if rank == 0:  # BUG: rank 0 builds the groups in another order
        a = dist.new_group([0, 1])
        b = dist.new_group([1, 2])
    else:
        b = dist.new_group([1, 2])
        a = dist.new_group([0, 1])
    if rank in (0, 1):
        dist.all_reduce(torch.ones(1), group=a)


def group_lists():
    rank, ws = _init()
    g = dist.new_group([0, 1] if rank == 0 else [0, 1, 2])  # BUG: rank 0 passes another rank list
    if g is not None and g != dist.GroupMember.NON_GROUP_MEMBER:
        dist.all_reduce(torch.ones(1), group=g)


def send_cycle():
    rank, _ = _init()
    peer = 1 - rank
    dist.send(torch.ones(8), dst=peer)  # BUG: both send first; a gloo send waits for the recv
    dist.recv(torch.empty(8), src=peer)


def ring_cycle():
    rank, ws = _init()
    dist.recv(torch.empty(2), src=(rank - 1) % ws)  # BUG: everyone receives first
    dist.send(torch.ones(2), dst=(rank + 1) % ws)


def p2p_fixed():
    rank, ws = _init()
    peer = 1 - rank
    out, got = torch.full((8,), float(rank)), torch.empty(8)
    reqs = [dist.isend(out, dst=peer), dist.irecv(got, src=peer)]
    for r in reqs:
        r.wait()
    ops = [dist.P2POp(dist.isend, out, peer), dist.P2POp(dist.irecv, got, peer)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    dist.destroy_process_group()
    return got[0].item()


def init_mismatch(port):
    rank = int(os.environ["RANK"])
    ws = int(os.environ["WORLD_SIZE"])
    method = f"tcp://localhost:{port}" if rank == 0 else "env://"  # BUG: a hard-coded endpoint on one path
    dist.init_process_group("gloo", init_method=method, rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=30))


def crash_in_call():
    rank, _ = _init()
    t = torch.ones(2)
    dist.all_reduce(t)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSEGV)  # a native crash of one rank
    dist.all_reduce(t)


def exit_code():
    rank, _ = _init()
    if rank == 0:
        os._exit(3)
    dist.barrier()


def exit_code_while_a_peer_waits():
    """Rank 0 exits at once; rank 2 waits in a recv from rank 1, which is busy in its own code: the sandbox ends
    rank 2 inside its call for rank 0's failure (a wait nothing about rank 0 ends), every time."""
    rank, _ = _init()
    if rank == 0:
        os._exit(3)
    if rank == 1:
        time.sleep(30)
    dist.recv(torch.zeros(1), src=1)


def raises():
    rank, _ = _init()
    dist.barrier()
    if rank == 2:
        raise ValueError("bad batch on rank 2")
    dist.all_reduce(torch.ones(1))


def straggler(seconds=30):
    rank, _ = _init()
    if rank == 1:
        time.sleep(seconds)  # busy in its own code, not stuck: the others will get their all_reduce eventually
    dist.all_reduce(torch.ones(1))


def object_collectives():
    rank, ws = _init()
    objs = [None] * ws
    dist.all_gather_object(objs, {"rank": rank})
    box = [rank * 10] if rank == 0 else [None]
    dist.broadcast_object_list(box, src=0)
    gathered = [None] * ws if rank == 0 else None
    dist.gather_object(rank, gathered, dst=0)
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=20))
    dist.destroy_process_group()
    return [o["rank"] for o in objs], box[0], gathered


def async_collective():
    rank, ws = _init()
    t = torch.ones(3)
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    out = [torch.empty(3) for _ in range(ws)]
    dist.all_gather(out, t)
    dist.destroy_process_group()
    return t.tolist()


def prints_and_returns(x):
    print(f"hello from {os.environ['RANK']}")
    return x * int(os.environ["RANK"])


def tag_mismatch():
    rank, _ = _init()
    if rank == 0:
        dist.send(torch.ones(2), dst=1, tag=1)
    else:
        dist.recv(torch.empty(2), src=0, tag=2)  # BUG: another tag


def dtype_mismatch(dtype="float64", odd=2):
    """Every rank all_reduces 4 elements; rank `odd` in another dtype (float64: another size on the wire, gloo
    aborts; int32: the same size, gloo pairs it and sums the bits as its own type)."""
    rank, _ = _init()
    t = torch.ones(4, dtype=getattr(torch, dtype) if rank == odd else torch.float32)  # BUG: one rank's dtype
    dist.all_reduce(t)
    dist.destroy_process_group()
    return t.tolist()


def ring_exchange(how):
    """Each rank exchanges a tensor with both neighbours of a ring (on 3 ranks, with every other rank).
    how="even_first": blocking send/recv, even ranks sending first, odd ranks receiving first (the advice that
    deadlocks among an odd number of ranks: ranks 0 and 2 are neighbours and both send first);
    how="isend_irecv" / "batch": both sides posted first, then every request waited on (the advice that holds for
    any number of ranks). Returns what came from the left and from the right."""
    rank, ws = _init()
    right, left = (rank + 1) % ws, (rank - 1) % ws
    mine = torch.full((2,), float(rank))
    got = {right: torch.empty(2), left: torch.empty(2)}
    if how == "even_first":
        for peer in sorted({right, left}):
            if rank % 2 == 0:
                dist.send(mine, dst=peer)
                dist.recv(got[peer], src=peer)
            else:
                dist.recv(got[peer], src=peer)
                dist.send(mine, dst=peer)
    elif how == "isend_irecv":
        reqs = [dist.isend(mine, dst=p) for p in (right, left)] + [dist.irecv(got[p], src=p) for p in (right, left)]
        for r in reqs:
            r.wait()
    else:
        ops = [dist.P2POp(dist.isend, mine, p) for p in (right, left)] + \
              [dist.P2POp(dist.irecv, got[p], p) for p in (right, left)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    dist.destroy_process_group()
    return got[left][0].item(), got[right][0].item()
