"""Wrapping torch.distributed from the op table (`sandbox.calls.OPS`): every public call of it, and `Work.wait`,
goes through a wrapper that writes its enter and exit lines (`sandbox.trace.record`). Calls that torch makes from
inside a traced call (gather_object calling all_gather, ...) are not recorded twice. `install` and `uninstall` are
symmetric, and `paused` takes the wrappers off for a block.
"""
from __future__ import annotations

import contextlib
import functools
import os
import time

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from sandbox import calls, compat, events
from sandbox.trace import describe, inflight, record, sink
from sandbox.trace.describe import Spec

_installed = False
_optim_hooks: list = []  # handles of the optimizers' step hooks (record.optimizer_stepping, _stepped), installed
_MISSING = object()
_patched: list[tuple] = []  # (owner, attribute, what was there before, the wrapper put there), in install order


def _wrap(spec: Spec, fn):
    tls = sink.tls  # one object for the life of the process: bound here, not looked up on every call

    @functools.wraps(fn)
    def traced(*args, **kwargs):
        if sink.fd is None or getattr(tls, "depth", 0):
            return fn(*args, **kwargs)
        tls.depth = 1
        try:
            # an explored schedule: asleep before the enter line (in the rank's own code, as a late rank is), and
            # a receive from any rank called with the sender chosen, recorded as the program made it
            cargs, ckwargs = args, kwargs
            if record.before_call is not None:
                cargs, ckwargs = record.before_call(spec, args, kwargs)
            try:
                call_id, ev, plain = record.enter(spec, args, kwargs)
            except Exception as e:  # noqa: BLE001  the tracer must never break the user's call: it runs untraced
                call_id = ev = plain = None
                record.tracer_error(spec.name, e)
            tls.work = None
            try:
                out = fn(*cargs, **ckwargs)
            except BaseException as e:
                if call_id is not None:
                    record.exit_error(call_id, spec.name, e)
                raise
            if plain:  # a synchronous call on CPU tensors: its exit line is all (record._plain_exit)
                tls.work = None
                try:
                    os.write(sink.fd, events.exit_line(sink.rank, call_id, spec.name, time.time()))
                except Exception as e:  # noqa: BLE001  the call worked: our bookkeeping must not make it fail
                    record.exit_anyway(call_id, spec.name, e)
            elif call_id is not None:
                try:
                    record.returned(spec, call_id, ev, args, kwargs, out)
                except Exception as e:  # noqa: BLE001  the call worked: our bookkeeping must not make it fail
                    record.exit_anyway(call_id, spec.name, e)
            return out
        finally:
            tls.depth = 0

    traced.__sandbox_traced__ = fn
    return traced


def _wrap_wait(orig):
    @functools.wraps(orig)
    def wait(self, *args, **kwargs):
        if getattr(sink.tls, "depth", 0):
            sink.tls.work = self  # a traced synchronous call waiting on its own Work
            return orig(self, *args, **kwargs)
        hit = record.outstanding.pop(id(self), None) if sink.fd is not None else None
        if hit is None or hit[0] is not self:
            return orig(self, *args, **kwargs)
        try:
            record.written_before_wait(hit[1])
            call_id = record.enter_wait(hit[1])
        except Exception as e:  # noqa: BLE001  the tracer must never break the user's wait: it runs untraced
            call_id = None
            record.tracer_error("wait", e)
        sink.tls.depth = 1
        try:
            out = orig(self, *args, **kwargs)
        except BaseException as e:
            if call_id is not None:
                record.exit_error(call_id, "wait", e)
            raise
        finally:
            sink.tls.depth = 0
        if call_id is not None:
            try:
                if not inflight.completed(self):
                    inflight.in_flight(self, call_id, "wait")
                elif hit[1].get("op") == "irecv" and hit[1].get("peer") is None:
                    sink.emit({"ev": "exit", "rank": sink.rank, "id": call_id, "op": "wait",
                               "from": _global(hit[1], compat.work_source(self))})
                else:
                    sink.write(events.exit_line(sink.rank, call_id, "wait", time.time()))
            except Exception as e:  # noqa: BLE001  the wait worked: our bookkeeping must not make it fail
                record.exit_anyway(call_id, "wait", e)
        return out

    wait.__sandbox_traced__ = orig
    return wait


def _global(call: dict, group_rank: int | None) -> int | None:
    """A rank within the group of `call` as a global rank (None when unknown)."""
    members = call.get("group")
    if group_rank is None or group_rank < 0:
        return None
    return members[group_rank] if isinstance(members, list) and group_rank < len(members) else group_rank


MAX_PARAMS = 2000  # a DDP record names at most this many parameters


def _wrap_ddp_init(orig):
    """DDP's constructor: before it runs (it raises when the ranks' models differ), record the parameters it will
    reduce, in its order (the indices its errors name), with their shapes, and the buffers it broadcasts, as a `ddp`
    event. Only the tracer knows their names: the Flight Recorder sees the buckets' sizes."""
    @functools.wraps(orig)
    def __init__(self, module, *args, **kwargs):
        if sink.fd is not None and not getattr(sink.tls, "depth", 0):
            try:
                params = [[n, list(p.shape)] for n, p in module.named_parameters() if p.requires_grad][:MAX_PARAMS]
                buffers = [[n, list(b.shape)] for n, b in module.named_buffers()][:MAX_PARAMS]
                where, func = describe.site(describe.user_frame(1))
                sink.emit({"ev": "ddp", "rank": sink.rank, "t": time.time(), "site": where, "func": func,
                           "params": params, "buffers": buffers,
                           "broadcast_buffers": bool(kwargs.get("broadcast_buffers", True)),
                           "find_unused": bool(kwargs.get("find_unused_parameters", False))})
            except Exception as e:  # noqa: BLE001  the tracer must never break the user's model
                record.tracer_error("DistributedDataParallel", e)
        return orig(self, module, *args, **kwargs)

    __init__.__sandbox_traced__ = orig
    return __init__


def _patch(owner, attr: str, wrapper) -> None:
    _patched.append((owner, attr, vars(owner).get(attr, _MISSING), wrapper))
    setattr(owner, attr, wrapper)


def install() -> None:
    """Wrap torch.distributed's public calls and Work.wait (idempotent). Events are written only once `start`
    gives a sink. Argument positions are read here, once, from the signatures of the functions wrapped."""
    global _installed
    if _installed:
        return
    for name, op in calls.OPS.items():
        fn = getattr(c10d, name, None)
        if fn is None or hasattr(fn, "__sandbox_traced__"):
            continue
        traced = _wrap(Spec(name, op, fn), fn)
        if getattr(dist, name, None) is fn:
            _patch(dist, name, traced)
        _patch(c10d, name, traced)
    Work = dist.Work
    if not hasattr(Work.wait, "__sandbox_traced__"):
        _patch(Work, "wait", _wrap_wait(Work.wait))
    DDP = torch.nn.parallel.DistributedDataParallel
    if not hasattr(DDP.__init__, "__sandbox_traced__"):
        _patch(DDP, "__init__", _wrap_ddp_init(DDP.__init__))
    _hook_optimizers()
    _installed = True


def _hook_optimizers() -> None:
    """Every torch.optim optimizer's step, seen through torch's public global hooks (before it, and after): an
    `optim` event each, with when it started and when it returned."""
    if not _optim_hooks:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        _optim_hooks.append(register_optimizer_step_pre_hook(record.optimizer_stepping))
        _optim_hooks.append(register_optimizer_step_post_hook(record.optimizer_stepped))


def _unhook_optimizers() -> None:
    while _optim_hooks:
        _optim_hooks.pop().remove()


def uninstall() -> None:
    """Put back every function `install` replaced (idempotent). An attribute someone else has replaced since is
    left as they set it: putting ours back would undo their change."""
    global _installed
    _unhook_optimizers()
    while _patched:
        owner, attr, before, wrapper = _patched.pop()
        if vars(owner).get(attr) is not wrapper:
            continue
        if before is _MISSING:
            delattr(owner, attr)
        else:
            setattr(owner, attr, before)
    _installed = False


@contextlib.contextmanager
def paused():
    """Inside this block torch.distributed is torch's own again: every wrapper is taken off and nothing is recorded,
    so a benchmark times PyTorch, not the tracer (`python -m sandbox.bench`). Put back on the way out, as it was."""
    global _installed
    was_installed, patched, old_sink = _installed, list(_patched), sink.set_sink(None)
    uninstall()
    try:
        yield
    finally:
        for owner, attr, _before, wrapper in patched:  # the same wrappers, so references taken before stay valid
            _patch(owner, attr, wrapper)
        if was_installed:
            _hook_optimizers()
        _installed = was_installed
        sink.set_sink(old_sink)
