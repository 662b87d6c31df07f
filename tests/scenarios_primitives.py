"""Rank functions for tests/test_primitives.py. Each one creates its process group as a user's script would, runs
several checks of sandbox.primitives and returns what it saw, so one launch covers many checks. The inputs come
from functions the test process calls too, to build its single-process reference."""
import datetime

import torch
import torch.distributed as dist

from sandbox.primitives import (barrier, broadcast_object, broadcast_tensor, gather_object, gather_tensor,
                                get_device, get_rank, get_world_size, is_distributed, is_main_process,
                                reduce_tensor)

UNEVEN_SHAPES = [(), (3,), (2, 2), (0,), (1, 3)]  # rank r gathers a tensor of shape UNEVEN_SHAPES[r]


def grad(rank):
    return torch.arange(6, dtype=torch.float32).reshape(2, 3) * (rank + 1) + rank / 3  # (2, 3) per rank


def counts(rank):
    return torch.tensor([rank + 1, 10 * rank], dtype=torch.int64)


def uneven(rank):
    shape = UNEVEN_SHAPES[rank]
    return torch.arange(float(torch.Size(shape).numel())).reshape(shape) + 100 * rank


def _error(call):
    """(type, message) of what call() raises, or None: the ranks carry on after a refused call."""
    try:
        call()
    except (TypeError, ValueError) as e:
        return type(e).__name__, str(e)
    return None


def _init():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    return dist.get_rank(), dist.get_world_size()


def everything():
    """Every helper on every rank, and every refusal; the last reduce proves the ranks are still in step."""
    rank, world = _init()
    out = {"who": (is_distributed(), get_rank(), get_world_size(), is_main_process(), str(get_device()))}
    g = grad(rank)
    out["sum"], out["mean"] = reduce_tensor(g, op="sum"), reduce_tensor(g, op="mean")
    out["default_op"] = reduce_tensor(g)
    out["int_sum"] = reduce_tensor(counts(rank), op="sum")
    out["input_untouched"] = torch.equal(g, grad(rank))
    out["gather"] = gather_tensor(g, dst=1)
    out["uneven"] = gather_tensor(uneven(rank), dst=0)
    out["scalars"] = gather_tensor(torch.tensor(rank * 0.5), dst=world - 1)
    buf = grad(2) if rank == 2 else torch.zeros(2, 3)
    out["bcast"] = broadcast_tensor(buf, src=2)
    out["bcast_in_place"] = out["bcast"] is buf
    strided = (grad(1) if rank == 1 else torch.zeros(2, 3)).t()  # a transposed view: not contiguous
    broadcast_tensor(strided, src=1)
    out["bcast_strided"] = strided
    out["gather_obj"] = gather_object({"rank": rank, "t": torch.full((2,), float(rank))}, dst=0)
    out["bcast_obj"] = broadcast_object({"seed": 1234, "from": rank} if rank == 3 else None, src=3)
    out["barrier"] = barrier()
    out["errors"] = {
        "mean_int": _error(lambda: reduce_tensor(counts(rank), op="mean")),
        "mean_bool": _error(lambda: reduce_tensor(torch.ones(2, dtype=torch.bool), op="mean")),
        "bad_op": _error(lambda: reduce_tensor(g, op="max")),
        "not_tensor": _error(lambda: reduce_tensor(0.5)),
        "gather_dtypes": _error(lambda: gather_tensor(torch.ones(2, dtype=[torch.float32, torch.float64][rank == 3]))),
        "gather_dst_disagree": _error(lambda: gather_tensor(g, dst=1 if rank == 2 else 0)),
        "dst_out_of_range": _error(lambda: gather_tensor(g, dst=world)),
        "dst_not_int": _error(lambda: gather_tensor(g, dst=True)),
        # rank 0 sends a 0-dim flag, the others pass [1] buffers: equal byte counts, different shapes
        "bcast_shape": _error(lambda: broadcast_tensor(torch.tensor(1.0) if rank == 0 else torch.zeros(1))),
        # rank 0 draws an int64 seed, the others pass float32 buffers
        "bcast_dtype": _error(lambda: broadcast_tensor(torch.randint(0, 10**6, (1,)) if rank == 0 else torch.zeros(1))),
        "bcast_src_disagree": _error(lambda: broadcast_tensor(torch.zeros(1), src=rank % 2)),
        "obj_src_out_of_range": _error(lambda: broadcast_object(None, src=-1)),
    }
    out["still_in_step"] = reduce_tensor(torch.ones(1), op="sum")
    dist.destroy_process_group()
    return out


def barrier_on_main_only():
    """The first hang: only rank 0 reaches the barrier; the others go on to the next step's reduce."""
    _init()
    for step in range(2):
        reduce_tensor(torch.ones(1), op="mean")
        if is_main_process():
            barrier()  # BUG: the other ranks never arrive
    return "done"
