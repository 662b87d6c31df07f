"""The enter and exit lines of a call. The enter line is written before the call can block (so it reaches whoever
reads the file even if the call never returns or the process is killed); the exit line after it returns or raises.
The static part of an enter line (everything but id, time and seq) is cached by what it depends on, so a loop of
the same call costs a dictionary lookup and one write.
"""
from __future__ import annotations

import os
import sys
import threading
import time

import torch
import torch.distributed as dist

from sandbox import _paths, calls, events, words
from sandbox.trace import describe, inflight, sink

# the static part of an enter event, as a JSON fragment, keyed by what it depends on: op, call site, and the
# arguments' shapes/dtypes/devices/groups. Cleared whenever groups change.
static_cache: dict[tuple, tuple] = {}
_STATIC_MAX = 4096
_seq: dict[str, int] = {}
outstanding: dict[int, tuple] = {}  # id(Work) -> (Work, the fields of its call): asynchronous calls not waited on
_MAX_OUTSTANDING = 10000
# an explored schedule's part before each traced call (`sandbox.trace.perturb`): (spec, args, kwargs) -> the args and
# kwargs to call with (a sleep first, a receive's src chosen); None: none
before_call = None
on_error = None  # called once, after the first traced call that raised as a peer went away (a torchrun worker's stack)


def _key(v):
    """A hashable summary of an argument, as far as the event depends on it."""
    if isinstance(v, torch.Tensor):
        return (v.shape, v.dtype, v.device)
    if isinstance(v, (list, tuple)):
        return tuple([_key(x) for x in v])  # a list comprehension: faster than a generator here
    if v is None or isinstance(v, (int, float, str, bool)):
        return v
    try:
        hash(v)
        return (type(v), v) if not isinstance(v, dist.ProcessGroup) else ("pg", id(v))
    except TypeError:
        return ("obj", id(v))


def _by_torch(caller) -> bool:
    """Is this frame (the caller of a torch.distributed function) torch's own code?"""
    path = caller.f_code.co_filename if caller is not None else ""
    return _paths.TORCH_DIR is not None and path.startswith(_paths.TORCH_DIR)


def enter(spec: describe.Spec, args: tuple, kwargs: dict) -> tuple[int, dict | None, bool]:
    """Write the enter event of a call. Returns its id, for an asynchronous call its fields (its Work's `wait`
    repeats them), and whether its exit is a plain exit line (`_plain_exit`). Writing the line is the last thing it
    does."""
    frame = describe.user_frame(2)
    code = frame.f_code if frame is not None else None
    thread = threading.get_ident()
    if thread == threading.main_thread().ident:
        thread = None  # the usual case: a call from another thread says which (below), the main thread's do not
    hit = key = None
    if spec.cacheable:
        # the call site by the id of its code object (hashing the code itself costs more than the rest of the key);
        # the cached entry holds the code object, so that id cannot be reused while the entry exists
        key = (spec.name, id(code), frame.f_lineno if frame is not None else None, tuple([_key(a) for a in args]),
               _key(tuple(kwargs.items())) if kwargs else None, thread)
        hit = static_cache.get(key)
    if hit is None:
        static = describe.describe(spec, args, kwargs, frame)
        if thread is not None:
            static["thread"] = threading.current_thread().name
        if static.get("async") and _by_torch(sys._getframe(2)):
            # made by torch's own code (Join's shadow all_reduce, DDP's hooks), which waits on the Work in C++,
            # where no wait can be seen: not the user's request to wait on
            static["internal"] = True
        hit = (events.fragment(static), static.get("gname", "?"), static, code,
               spec.cacheable and _plain_exit(spec, static), _group(spec, args, kwargs))
        if key is not None:
            if len(static_cache) >= _STATIC_MAX:
                static_cache.clear()
            static_cache[key] = hit
    frag, gname, static, _, plain, group = hit
    kind = spec.kind
    cseq = describe.backend_seq(group) if kind == "coll" and group is not None else None
    with sink.lock:
        call_id = next(sink.ids)
        if kind == "coll":
            seq = _seq[gname] = _seq.get(gname, 0) + 1
        else:
            seq = 0 if kind == "init" else None  # init opens the world group's sequence
        os.write(sink.fd, events.enter_line(sink.rank, call_id, time.time(), frag, seq, cseq))  # the hot path
    if not static.get("async"):
        return call_id, None, plain
    ev = {**static, "id": call_id}
    if seq is not None:
        ev["seq"] = seq
    return call_id, ev, False


def _plain_exit(spec: describe.Spec, static: dict) -> bool:
    """Is the exit of this call (of a cached call site: its static fields) only an exit line once it returned? A
    synchronous call on CPU tensors, not an object collective, not a recv (whose exit may say whom it got it from):
    `returned` would write just that, after looking each of these up again (the tracer's hot path, per call)."""
    return (not static.get("async") and not spec.op.objects and spec.name != "recv"
            and spec.op.data is not None and all(d == "cpu" for d in static.get("devices") or ("?",)))


def _group(spec: describe.Spec, args: tuple, kwargs: dict):
    """The process group whose own count of collectives (`describe.backend_seq`) a collective's enter line carries:
    the call's, else the default group (None before init). Cached with the call site's static part, which is
    cleared whenever groups change."""
    try:
        return spec.arg(args, kwargs, "group") or dist.group.WORLD
    except Exception:  # noqa: BLE001  no default group yet
        return None


def enter_wait(of: dict) -> int:
    """Write the enter event of a `wait` on the Work of the asynchronous call `of`; returns its id. It carries
    what must match of `of` (`calls.MATCH_FIELDS`), so a rank waiting is compared like a rank inside the call."""
    where, func = describe.site(describe.user_frame(2))
    ev = {"ev": "enter", "rank": sink.rank, "id": None, "op": "wait", "of": of["op"], "of_id": of["id"],
          "site": where, "func": func}
    if "idx" in of:
        ev["of_idx"] = of["idx"]
    for k in ("peer", "sig", *calls.MATCH_FIELDS):
        if k in of:
            ev[k] = of[k]
    with sink.lock:
        ev["id"] = call_id = next(sink.ids)
        ev["t"] = time.time()
        sink.write(events.encode(ev))
    return call_id


def written_before_wait(of: dict) -> None:
    """Say so (a `written` event) when the tensor of the isend `of` was written in place since it was posted: the
    backend reads it when the transfer happens, so the peer may get the later value."""
    sent = of.get("_sent")
    if sent is not None and sent[0]._version != sent[1]:
        sink.emit({"ev": "written", "rank": sink.rank, "of_id": of["id"], "op": of["op"], "peer": of.get("peer"),
                   "site": of.get("site"), "wait_site": describe.site(describe.user_frame(1))[0], "t": time.time()})


def _remember_work(work, ev) -> None:
    if len(outstanding) >= _MAX_OUTSTANDING:  # never waited on: forget the oldest rather than grow forever
        outstanding.pop(next(iter(outstanding)))
    outstanding[id(work)] = (work, ev)


# Every process group lives until the rank exits (os._exit, sandbox/rank.py), as a script's globals do: dropped
# by the last DDP model that held one (a Reducer freed when the user's function returns), a gloo group's destructor
# joined its worker threads with the GIL held while a worker waited for the GIL to free a Python-owned tensor of its
# last all_reduce (torch 2.13: py-spy showed ~Reducer -> ~ProcessGroupGloo -> thread::join against
# ~AsyncAllreduceWork -> decref_pyobject -> gil_scoped_acquire), and about 1 run in 10 of a Join loop hung there.
_groups: list = []


def _keep(group) -> None:
    if group is not None:
        _groups.append(group)


def returned(spec: describe.Spec, call_id: int, ev: dict | None, args: tuple, kwargs: dict, out) -> None:
    """The tracer's bookkeeping after a call returned. Writing its exit line is the last thing it does."""
    name, kind = spec.name, spec.kind
    if kind in ("init", "new_group", "local"):
        static_cache.clear()  # groups changed: cached group names may be stale
        if name == "destroy_process_group":
            forget_groups()
        done = {"ev": "exit", "rank": sink.rank, "id": call_id, "op": name}
        if kind == "init":
            done["world_size"] = dist.get_world_size()
            done["group"] = list(range(done["world_size"]))
            _keep(dist.group.WORLD)
        elif kind == "new_group":
            _keep(out)
            info = describe.group_info(out) if out is not None else None
            done["gname"], done["group"] = info if info else (None, None)
        sink.emit(done)
        return
    if ev is not None and out is not None:  # asynchronous: its Works are recorded when waited on
        works = out if isinstance(out, list) else [out]
        for i, w in enumerate(works):
            sub = dict(ev)
            sent = spec.arg(args, kwargs, spec.op.data) if name == "isend" else None
            if name == "batch_isend_irecv" and i < len(ev.get("p2p", [])):
                sub["op"] = ev["p2p"][i]["op"]
                sub["peer"] = ev["p2p"][i]["peer"]
                sub["idx"] = i
                ops = args[0] if args else kwargs.get("p2p_op_list") or ()
                if sub["op"] == "isend" and i < len(ops):
                    sent = getattr(ops[i], "tensor", None)
            if isinstance(sent, torch.Tensor) and not ev.get("internal"):
                # the tensor an isend reads when the transfer happens, and its version (bumped by every write in
                # place): a write before the wait is seen at the wait (sandbox/trace/ops.py)
                sub["_sent"] = (sent, sent._version)
            _remember_work(w, sub)
    w, sink.tls.work = sink.tls.work, None  # the Work a synchronous call waited on (NCCL: returns early)
    on_gpu = spec.op.data is None or inflight.on_cuda(spec.arg(args, kwargs, spec.op.data))
    if w is None and spec.op.data is not None and on_gpu:
        w = inflight.StreamMark()  # NCCL synced at C++ level: the stream says when it is really done
    # a synchronous call on CPU tensors is over when it returns (gloo's reduce_scatter of uneven parts returns a
    # Work made of several all_reduces that never reports itself completed)
    if w is not None and on_gpu and not inflight.completed(w):
        inflight.in_flight(w, call_id, name)
    elif spec.op.objects:
        sink.emit({"ev": "exit", "rank": sink.rank, "id": call_id, "op": name,
                   **describe.object_devices(spec, args, kwargs)})
    elif name == "recv" and isinstance(out, int) and out >= 0 and spec.arg(args, kwargs, "src") is None \
            and spec.arg(args, kwargs, "group_src") is None:
        # a recv from any rank: torch returns whom it got the message from (a global rank)
        sink.emit({"ev": "exit", "rank": sink.rank, "id": call_id, "op": name, "from": out})
    else:
        os.write(sink.fd, events.exit_line(sink.rank, call_id, name, time.time()))


_step_started: dict[int, float] = {}  # id(optimizer) -> when its step began (`optimizer_stepping`)


def optimizer_stepping(optimizer, args, kwargs) -> None:
    """A torch.optim optimizer's step is about to run: remember when, for its `optim` event's `start`."""
    _step_started[id(optimizer)] = time.time()


def optimizer_stepped(optimizer, args, kwargs) -> None:
    """A torch.optim optimizer's step returned (torch calls this for every optimizer, `ops.install` registered it):
    what it stepped and the state it holds now, as an `optim` event. Not while the tracer is paused or inside a
    traced call (a framework's own step)."""
    start = _step_started.pop(id(optimizer), None)
    if sink.fd is None or getattr(sink.tls, "depth", 0):
        return
    try:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        state = [t for per in optimizer.state.values() for t in per.values()
                 if isinstance(t, torch.Tensor) and t.dim() > 0]  # not the 0-d step counters
        where, func = describe.site(describe.user_frame(1))
        sink.emit({"ev": "optim", "rank": sink.rank, "t": time.time(), "start": start, "op": type(optimizer).__name__,
                   "site": where, "func": func, "params": sum(p.numel() for p in params),
                   "state": sum(t.numel() for t in state),
                   "state_bytes": sum(t.numel() * t.element_size() for t in state)})
    except Exception as e:  # noqa: BLE001  the tracer must never break the user's step
        tracer_error("optimizer.step", e)


def exit_anyway(call_id: int, op: str, e: Exception) -> None:
    """The call returned but the tracer's bookkeeping of it failed: write its exit all the same (without it the
    rank would look inside the call forever, a false hang), then say what failed."""
    try:
        sink.write(events.exit_line(sink.rank, call_id, op, time.time()))
        sink.emit({"ev": "tracer_error", "rank": sink.rank, "id": call_id, "op": op, "error": repr(e)[:2000]})
    except Exception:  # noqa: BLE001  the trace file cannot be written at all: nothing more to record; the call worked
        pass


def exit_error(call_id: int, op: str, e: BaseException) -> None:
    global on_error
    try:
        sink.emit({"ev": "exit", "rank": sink.rank, "id": call_id, "op": op, "error": f"{type(e).__name__}: {e}"[:2000]})
    except Exception:  # noqa: BLE001  the trace file cannot be written: the user's own error matters more than ours
        pass
    if on_error is None or not words.peer_lost(str(e)):
        return  # only where a peer went away mid-call: a failure the program catches and gets past leaves no stack
    hook, on_error = on_error, None
    if hook is not None:
        try:
            hook()
        except Exception:  # noqa: BLE001  only a record of where the rank was: the user's own error matters more
            pass


def tracer_error(op: str, e: Exception) -> None:
    try:
        sink.emit({"ev": "tracer_error", "rank": sink.rank, "op": op, "error": repr(e)[:2000]})
    except Exception:  # noqa: BLE001  the trace file cannot be written: the call runs untraced all the same
        pass


def forget_groups() -> None:
    """Drop every reference the tracer holds to process groups and their Works, so a destroyed group is freed
    now and not during interpreter shutdown (where gloo's threads would be torn down in the wrong order)."""
    describe.groups.clear()
    outstanding.clear()
    inflight.pending.clear()
    static_cache.clear()
