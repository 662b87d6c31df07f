"""Every difference between the torch versions the sandbox supports, and every private name of torch it uses, in
one place. The rest of the package and the labs call the functions here; tests/test_compat.py holds that no other
module of sandbox/ or labs/ names what this module wraps, and runs each function on the torch installed.

Supported: torch 2.11, 2.13 and 2.14.1 (pyproject.toml's range). What differs between them:

- The tensor forms of all_gather and reduce_scatter were renamed in 2.13: `dist.all_gather_single` and
  `dist.reduce_scatter_single` are new there, and the old names, `dist.all_gather_into_tensor` and
  `dist.reduce_scatter_tensor`, became deprecated aliases (a FutureWarning on every call, then they call the new
  ones); 2.11 has only the old names. `all_gather_single` and `reduce_scatter_single` here call the newest name
  this torch has, looked up on `torch.distributed` at every call, so that in a rank the tracer's wrapper is what
  runs: the trace names the function torch ran (`ALL_GATHER_SINGLE`, `REDUCE_SCATTER_SINGLE`), and the op families
  (`sandbox.calls`, `sandbox.diagnose.sharding`) hold both names. FSDP2 on 2.13 calls the new names itself.
- gloo's list form of all_to_all: 2.11 refuses it ("Backend gloo does not support alltoall"); `all_to_all_single`
  works on every version, so the sandbox's own code uses only that (nothing to wrap).
- `torch.distributed.nn.functional.all_reduce` (an all_reduce autograd sees through, whose backward all-reduces the
  gradient too) is deprecated in 2.13 with a FutureWarning on every call. What torch's warning recommends instead,
  `torch.distributed._functional_collectives.all_reduce`, is private and runs as a C++ op that never passes through
  `torch.distributed.all_reduce`: the tracer would not see it (no hang diagnosis, no lab rule on it).
  `differentiable_all_reduce` does exactly what torch's deprecated function does (forward: a sum over the group;
  backward: the same sum of the gradient) through the public `dist.all_reduce`, on every version; a test compares
  the two.

Private names, each needed because no public API of these versions gives the same:

- `torch.distributed.distributed_c10d._get_default_store()` (`default_store`): the store `init_process_group` made.
  Ranks put small facts there (a pid) without a collective, which would be one more call in every trace a lab shows.
- `ProcessGroup._get_sequence_number_for_group()` (`sequence_number`): the backend's own count of the group's
  collectives, which C++ callers (DDP's reducer) advance too; it places a crashed rank's Python calls among the
  Flight Recorder's entries of the others.
- `torch._C._distributed_c10d._dump_fr_trace`, `_dump_fr_trace_json` and `_dump_nccl_trace` (`flight_recorder`,
  `flight_recorder_json`, `nccl_recorder`): PyTorch's Flight Recorder. Torch writes a dump by itself only when
  NCCL's watchdog fires; on gloo, and for a rank that is merely stuck, these calls are the only way to read it.
  `_dump_nccl_trace` exists only in CUDA builds (2.11's and 2.14.1's here, not the 2.13 CPU wheel).

- `torch.library._del_library` and `torch._dynamo.utils.dump_compile_times` (`drop_exit_teardown`): what torch
  runs at interpreter exit that nothing outside the process can see. `import torch` leaves one `weakref.finalize`
  per operator library it registered (134 on 2.13, 174 with torch._dynamo), each deregistering its operators when
  the interpreter exits; torch._dynamo registers an atexit handler that builds a table of its compile times
  (importing `tabulate`) to log at INFO. A rank ends with `os._exit` right after its atexit handlers, and these took
  27 ms of every rank's end, 62 ms where torch._dynamo was imported (both measured in a rank on 2 cores).

- The excepthook `init_process_group` installs (`programs_excepthook`): it prints the previous hook's output with
  "[rank<N>]:" before each line, and holds that hook in its closure (`old_hook`). A rank prints its own uncaught
  exception (the sandbox labels each rank's lines already), unless the program set a hook of its own, before its
  init or after: then that hook is called, as Python would.

Private names replaced by public ones (nothing to wrap): `distributed_c10d._get_default_group()` is `dist.group.WORLD`
(the same object, None before init); `distributed_c10d._get_process_group_name(g)` is `g.group_name` (the name
torch registered it under, "0" for the default group); `torch._C._distributed_c10d.Work` is `dist.Work` (the same
class, on every supported version).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

_c10d = torch._C._distributed_c10d

# the names the tensor forms go by on this torch, as the tracer records them
ALL_GATHER_SINGLE = "all_gather_single" if hasattr(dist, "all_gather_single") else "all_gather_into_tensor"
REDUCE_SCATTER_SINGLE = "reduce_scatter_single" if hasattr(dist, "reduce_scatter_single") else "reduce_scatter_tensor"


def all_gather_single(output, input, group=None, async_op=False):
    """Every rank's `input`, in rank order, into `output` (world size x `input`'s elements): `dist.all_gather_single`
    on torch 2.13 and later, `dist.all_gather_into_tensor` before."""
    return getattr(dist, ALL_GATHER_SINGLE)(output, input, group=group, async_op=async_op)


def reduce_scatter_single(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
    """Part i of every rank's `input`, reduced, into rank i's `output` (`input` holds world size x `output`'s
    elements): `dist.reduce_scatter_single` on torch 2.13 and later, `dist.reduce_scatter_tensor` before."""
    return getattr(dist, REDUCE_SCATTER_SINGLE)(output, input, op=op, group=group, async_op=async_op)


class _AllReduceBothWays(torch.autograd.Function):
    """torch.distributed.nn.functional's `_AllReduce` (sum), on the public all_reduce."""

    @staticmethod
    def forward(ctx, tensor, group):
        ctx.group = group
        out = tensor.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return _AllReduceBothWays.apply(grad, ctx.group), None


def differentiable_all_reduce(tensor, group=None):
    """The sum of `tensor` over the group, as a new tensor autograd sees through; its backward sums the gradient over
    the group too. What `torch.distributed.nn.functional.all_reduce(tensor)` returns, without its deprecation."""
    return _AllReduceBothWays.apply(tensor, group)


def default_store():
    """The store `init_process_group` made (a TCPStore under env:// and tcp://), shared by every rank."""
    return dist.distributed_c10d._get_default_store()


def sequence_number(group=None) -> int | None:
    """The group's own count of collectives so far (the default group's when None); None before init or where the
    backend keeps none (a wrapped or stand-in backend)."""
    try:
        return (dist.group.WORLD if group is None else group)._get_sequence_number_for_group()
    except Exception:  # noqa: BLE001  no default group yet, or a backend without the count
        return None


def work_source(work) -> int | None:
    """The rank within its group that a finished irecv without src received from (None where torch cannot say)."""
    try:
        return int(work._source_rank())
    except Exception:  # noqa: BLE001  not a receive, not finished, or a backend without the count
        return None


def flight_recorder(stack_traces: bool = False) -> bytes:
    """This process's Flight Recorder (every backend's but NCCL's own), as the pickle torch writes. Without the
    calls' Python frames unless asked: turning them into text imports torch._inductor the first time (seconds)."""
    return _c10d._dump_fr_trace(includeStackTraces=stack_traces)


def flight_recorder_json() -> str | None:
    """The same dump as JSON text; None where this torch has no Flight Recorder to read."""
    dump = getattr(_c10d, "_dump_fr_trace_json", None)
    return dump() if dump is not None else None


def drop_exit_teardown() -> None:
    """Before a process about to `os._exit` runs its atexit handlers: keep torch's own teardown out of them where
    nothing outside the process could see it. Its operator libraries' finalizers are not run (their registrations
    end with the process); torch._dynamo's compile-time summary is still logged if its logger would print it. Every
    other handler and finalizer, the user's among them, runs as before."""
    import atexit
    import logging
    import sys
    import weakref

    drop = getattr(sys.modules.get("torch.library"), "_del_library", None)
    for f in list(getattr(weakref.finalize, "_registry", ())):  # the stdlib's own table of live finalizers
        info = f.peek()
        if info is not None and info[1] is drop:
            f.atexit = False
    utils = sys.modules.get("torch._dynamo.utils")
    dump = getattr(utils, "dump_compile_times", None)
    if dump is not None and not logging.getLogger(utils.__name__).isEnabledFor(logging.INFO):
        atexit.unregister(dump)


def programs_excepthook():
    """The `sys.excepthook` the program set itself, looked for through the hook `init_process_group` wraps around
    the one before it; None when it set none (Python's default is there, torch's wrapping aside)."""
    import sys

    hook = sys.excepthook
    for _ in range(16):  # each init_process_group wraps once more
        if hook is sys.__excepthook__:
            return None
        if getattr(hook, "__module__", None) != dist.distributed_c10d.__name__:
            return hook
        code, cells = getattr(hook, "__code__", None), getattr(hook, "__closure__", None) or ()
        held = dict(zip(code.co_freevars, cells)) if code is not None else {}
        if "old_hook" not in held:
            return None  # torch's hook, of another shape: as if the program set none
        hook = held["old_hook"].cell_contents
    return None


def nccl_recorder() -> bytes | None:
    """NCCL's own recorder (its entries carry CUDA events; the generic dump leaves them out: torch 2.11 on H100s put
    DDP's all_reduces there only), as a pickle; None in a build without CUDA or where no GPU is usable."""
    dump = getattr(_c10d, "_dump_nccl_trace", None)
    if dump is None or not torch.cuda.is_available():
        return None
    return dump(includeCollectives=True, includeStackTraces=False, onlyActive=False)
