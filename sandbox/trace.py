"""The tracer: every public torch.distributed call of a rank, recorded on entry and on exit.

Each call writes one JSON line before it starts ("enter") and one after it returns or raises ("exit") to a
per-rank file opened with O_APPEND. The enter line is in the kernel before the call can block, so it reaches
whoever reads the file even if the call never returns or the process is killed. The lines and their fields are
`sandbox.events`' (the one place the trace format is written down); this module only decides what goes in them.

An event carries the op, the group (its global ranks and its name), the per-group sequence number of
collectives, the shapes/dtypes/devices of the rank's contribution, the root or peer, and the user's call site
(the first frame outside torch and the sandbox's plumbing). Calls that torch makes from inside a traced call
(gather_object calling all_gather, ...) are not recorded twice.

What the tracer knows about each op is one table, `OPS`: its kind, and which argument is the contribution and
which the root. Where each argument sits is read from the signature of the function being wrapped when it is
installed, so a call made positionally (`broadcast(t, 0, g)`) is recorded like one made by keyword on every torch
this runs with, without a table per version.

Inside the sandbox `sandbox.rank` installs it. Under torchrun use the CLI:

    torchrun --nproc-per-node 4 -m sandbox.trace --trace-dir traces/ train.py --lr 0.1
    python -m sandbox.diagnose traces/
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import os
import socket
import sys
import threading
import time
import traceback
from typing import NamedTuple

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from sandbox import _paths, events
from sandbox._paths import is_plumbing


class Op(NamedTuple):
    """What the tracer must know about a torch.distributed function beyond its signature."""
    kind: str                        # "coll" (counts in its group's sequence), "p2p", "init", "new_group", "local"
    data: str | None = None          # the argument that is this rank's contribution (its shapes are recorded)
    root: str | None = None          # the argument naming the root (collectives) or the peer (p2p) as a global
    #                                  rank; "group_" + root names it as a rank of the group instead
    default_root: int | None = None  # the root torch takes when neither is given
    returns_work: bool = False       # asynchronous whatever its arguments


OPS: dict[str, Op] = {
    "all_reduce": Op("coll", "tensor"),
    "all_reduce_coalesced": Op("coll", "tensors"),
    "all_gather": Op("coll", "tensor"),
    "all_gather_into_tensor": Op("coll", "input_tensor"),
    "all_gather_single": Op("coll", "input_tensor"),
    "all_gather_coalesced": Op("coll", "input_tensor_list"),
    "reduce_scatter": Op("coll", "input_list"),
    "reduce_scatter_tensor": Op("coll", "input"),
    "reduce_scatter_single": Op("coll", "input"),
    "all_to_all": Op("coll", "input_tensor_list"),
    "all_to_all_single": Op("coll", "input"),
    "broadcast": Op("coll", "tensor", "src"),
    "reduce": Op("coll", "tensor", "dst"),
    "gather": Op("coll", "tensor", "dst"),
    "scatter": Op("coll", "tensor", "src"),
    "barrier": Op("coll"),
    "monitored_barrier": Op("coll"),
    "all_gather_object": Op("coll"),
    "gather_object": Op("coll", None, "dst", default_root=0),
    "broadcast_object_list": Op("coll", None, "src", default_root=0),
    "scatter_object_list": Op("coll", None, "src", default_root=0),
    "send": Op("p2p", "tensor", "dst"),
    "recv": Op("p2p", "tensor", "src"),  # no src: from any rank
    "isend": Op("p2p", "tensor", "dst", returns_work=True),
    "irecv": Op("p2p", "tensor", "src", returns_work=True),
    "send_object_list": Op("p2p", None, "dst"),
    "recv_object_list": Op("p2p", None, "src"),
    "batch_isend_irecv": Op("p2p", returns_work=True),
    "init_process_group": Op("init"),
    "new_group": Op("new_group"),
    "new_subgroups": Op("local"),
    "new_subgroups_by_enumeration": Op("local"),
    "destroy_process_group": Op("local"),
}


class _Spec:
    """An op of `OPS` bound to the function it wraps: where each argument sits, from that function's signature."""

    __slots__ = ("name", "op", "kind", "pos", "defaults", "cacheable")

    def __init__(self, name: str, op: Op, fn):
        self.name, self.op, self.kind = name, op, op.kind
        self.pos: dict[str, int] = {}
        self.defaults: dict[str, object] = {}
        try:
            params = inspect.signature(fn).parameters.values()  # follows functools.wraps to torch's own function
        except (TypeError, ValueError):  # no signature to read (a C function): arguments by keyword are still seen
            params = ()
        positional = True
        for i, p in enumerate(params):
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                positional = False  # *args or keyword-only: nothing after it can be passed by position
            elif positional:
                self.pos[p.name] = i
            if p.default is not p.empty:
                self.defaults[p.name] = p.default
        self.cacheable = op.kind in ("coll", "p2p") and "object" not in name and name != "batch_isend_irecv"

    def arg(self, args: tuple, kwargs: dict, name: str, default=None):
        """The argument `name` of a call, however it was passed; else the signature's default, else `default`."""
        i = self.pos.get(name)
        if i is not None and i < len(args):
            return args[i]
        if name in kwargs:
            return kwargs[name]
        return self.defaults.get(name, default)


_tls = threading.local()
_fd: int | None = None
_rank: int | None = None
_ids = itertools.count(1)        # call ids; next() is atomic, so two threads never get the same one
_new_groups = itertools.count()  # this rank's new_group calls
_lock = threading.Lock()         # an id, a sequence number and the line that carries them are written as one
_seq: dict[str, int] = {}
_groups: dict[int, tuple] = {}
_outstanding: dict[int, tuple] = {}
_display_cache: dict[str, str] = {}
# the static part of an enter event (everything but id, time and seq), as a JSON fragment, keyed by what it
# depends on: op, call site, and the arguments' shapes/dtypes/devices/groups. Cleared whenever groups change.
_static: dict[tuple, tuple] = {}
_STATIC_MAX = 4096
_MAX_OUTSTANDING = 10000
_installed = False
_MISSING = object()
_patched: list[tuple] = []  # (owner, attribute, what was there before, the wrapper put there), in install order


def _user_frame(depth: int):
    f = sys._getframe(depth + 1)
    while f is not None and is_plumbing(f.f_code.co_filename):
        f = f.f_back
    return f


def _display(filename: str) -> str:
    shown = _display_cache.get(filename)
    if shown is None:
        try:
            rel = os.path.relpath(filename)
            shown = rel if not rel.startswith("..") else filename
        except ValueError:  # another drive (Windows): the absolute path is the honest answer
            shown = filename
        _display_cache[filename] = shown
    return shown


def _site(frame) -> tuple[str, str]:
    if frame is None:
        return "?", "?"
    return f"{_display(frame.f_code.co_filename)}:{frame.f_lineno}", frame.f_code.co_name


def call_site(depth: int = 2) -> tuple[str, str]:
    """(file:line, function) of the first frame outside torch and the sandbox's plumbing."""
    return _site(_user_frame(depth))


def emit(event: dict) -> None:
    """Append one event line to this rank's trace (no-op when the tracer has no sink)."""
    if _fd is None:
        return
    event.setdefault("t", time.time())
    os.write(_fd, events.encode(event))


def set_sink(fd: int | None) -> int | None:
    """Write this rank's events to `fd` from now on (None: record nothing); returns the previous sink.
    For measuring the tracer's own cost with the trace going to /dev/null (benchmarks/core.py)."""
    global _fd
    old, _fd = _fd, fd
    return old


def _tensor_info(x):
    """shapes, dtypes, devices of a tensor or a (nested) list of tensors."""
    if isinstance(x, torch.Tensor):
        return [list(x.shape)], [str(x.dtype).replace("torch.", "")], [str(x.device)]
    if isinstance(x, (list, tuple)):
        shapes, dtypes, devices = [], [], []
        for t in x:
            if isinstance(t, torch.Tensor):
                shapes.append(list(t.shape))
                dtypes.append(str(t.dtype).replace("torch.", ""))
                devices.append(str(t.device))
        return shapes, dtypes, devices
    return None, None, None


def group_info(g) -> tuple[str, list[int]] | None:
    """(name, global ranks) of a process group; None before init or for a group this rank is not in."""
    try:
        if g is None:
            if not dist.is_initialized():
                return None
            g = c10d._get_default_group()
        hit = _groups.get(id(g))
        if hit is not None and hit[0] is g:
            return hit[1], hit[2]
        if g is c10d.GroupMember.NON_GROUP_MEMBER:
            return None
        info = (g, c10d._get_process_group_name(g), list(dist.get_process_group_ranks(g)))
        _groups[id(g)] = info
        return info[1], info[2]
    except Exception:  # noqa: BLE001  not a group torch knows (destroyed, or a wrong argument the call will reject)
        return None


def _endpoint(init_method, store) -> str:
    if store is not None:
        return "store object"
    method = init_method or "env://"
    if method.startswith("env://"):
        return f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    if method.startswith("tcp://"):
        host, _, port = method[len("tcp://"):].partition("?")[0].rpartition(":")
        host = host.strip("[]")
        if host in ("localhost", "127.0.0.1", "::1", "") or host == socket.gethostname():
            host = "127.0.0.1"
        return f"{host}:{port}"
    return method


def _describe(spec: _Spec, args: tuple, kwargs: dict, frame) -> dict:
    """The static fields of a call's enter event (all but id, time and seq)."""
    name, op = spec.name, spec.op

    def arg(argname, default=None):
        return spec.arg(args, kwargs, argname, default)

    site, func = _site(frame)
    ev = {"op": name, "site": site, "func": func}
    if op.kind == "init":
        ws = arg("world_size")
        ws = int(ws if ws not in (None, -1) else os.environ.get("WORLD_SIZE", -1))
        init_method, store, device_id, timeout = arg("init_method"), arg("store"), arg("device_id"), arg("timeout")
        ev.update(backend=str(arg("backend")), init_method=init_method or ("env://" if store is None else None),
                  endpoint=_endpoint(init_method, store), world_size=ws,
                  MASTER_ADDR=os.environ.get("MASTER_ADDR"), MASTER_PORT=os.environ.get("MASTER_PORT"),
                  device_id=str(device_id) if device_id is not None else None,
                  timeout_s=timeout.total_seconds() if timeout is not None else None,
                  group=list(range(ws)) if ws > 0 else None, gname="0")
        return ev
    if op.kind == "new_group":
        ranks = arg("ranks")
        ev["ranks"] = "all" if ranks is None else sorted(ranks) if arg("sort_ranks", True) else list(ranks)
        ev["index"] = next(_new_groups)
        if arg("use_local_synchronization"):
            ev["local_sync"] = True
        return ev
    if op.kind == "local":
        return ev
    info = group_info(arg("group"))
    if info is not None:
        ev["gname"], ev["group"] = info
    if op.data is not None:
        shapes, dtypes, devices = _tensor_info(arg(op.data))
        if shapes is not None:
            ev.update(shapes=shapes, dtypes=dtypes, devices=devices)
    if op.root is not None:
        root = arg(op.root)
        if root is None:
            in_group = arg("group_" + op.root)
            if isinstance(in_group, int) and info is not None and 0 <= in_group < len(info[1]):
                root = info[1][in_group]  # recorded as a global rank, whichever way it was given
            elif in_group is None:
                root = op.default_root
            else:
                root = in_group
        if op.kind == "p2p":
            ev["peer"] = root
            tag = arg("tag", 0)
            if tag:
                ev["tag"] = tag
        else:
            ev["root"] = root
    if op.kind == "coll":
        ev["sig"] = f"{name}|{ev.get('root')}|{ev.get('shapes')}|{ev.get('dtypes')}"
        if "op" in spec.pos or "op" in spec.defaults:  # the reduce op (all_reduce, reduce, reduce_scatter)
            red = arg("op")
            ev["redop"] = getattr(red, "name", None) or str(red)
    elif name == "batch_isend_irecv":
        ev["p2p"] = [{"op": getattr(getattr(o, "op", None), "__name__", "?"), "peer": getattr(o, "peer", None),
                      "shapes": _tensor_info(getattr(o, "tensor", None))[0]} for o in arg("p2p_op_list") or ()]
    if op.returns_work or arg("async_op", False):
        ev["async"] = True
    return ev


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


def _enter(spec: _Spec, args: tuple, kwargs: dict) -> tuple[int, dict | None]:
    """Write the enter event of a call. Returns its id, and for an asynchronous call its fields (its Work's
    `wait` repeats them). Writing the line is the last thing it does."""
    frame = _user_frame(2)
    code = frame.f_code if frame is not None else None
    hit = key = None
    if spec.cacheable:
        # the call site by the id of its code object (hashing the code itself costs more than the rest of the key);
        # the cached entry holds the code object, so that id cannot be reused while the entry exists
        key = (spec.name, id(code), frame.f_lineno if frame is not None else None, tuple([_key(a) for a in args]),
               _key(tuple(kwargs.items())) if kwargs else None)
        hit = _static.get(key)
    if hit is None:
        static = _describe(spec, args, kwargs, frame)
        hit = (events.fragment(static), static.get("gname", "?"), static, code)
        if key is not None:
            if len(_static) >= _STATIC_MAX:
                _static.clear()
            _static[key] = hit
    frag, gname, static, _ = hit
    kind = spec.kind
    with _lock:
        call_id = next(_ids)
        if kind == "coll":
            seq = _seq[gname] = _seq.get(gname, 0) + 1
        else:
            seq = 0 if kind == "init" else None  # init opens the world group's sequence
        os.write(_fd, events.enter_line(_rank, call_id, time.time(), frag, seq))
    if not static.get("async"):
        return call_id, None
    ev = {**static, "id": call_id}
    if seq is not None:
        ev["seq"] = seq
    return call_id, ev


def _remember_work(work, ev) -> None:
    if len(_outstanding) >= _MAX_OUTSTANDING:  # never waited on: forget the oldest rather than grow forever
        _outstanding.pop(next(iter(_outstanding)))
    _outstanding[id(work)] = (work, ev)


def _returned(spec: _Spec, call_id: int, ev: dict | None, args: tuple, kwargs: dict, out) -> None:
    """The tracer's bookkeeping after a call returned. Writing its exit line is the last thing it does."""
    name, kind = spec.name, spec.kind
    if kind in ("init", "new_group", "local"):
        _static.clear()  # groups changed: cached group names may be stale
        if name == "destroy_process_group":
            forget_groups()
        done = {"ev": "exit", "rank": _rank, "id": call_id, "op": name}
        if kind == "init":
            done["world_size"] = dist.get_world_size()
            done["group"] = list(range(done["world_size"]))
        elif kind == "new_group":
            info = group_info(out) if out is not None else None
            done["gname"], done["group"] = info if info else (None, None)
        emit(done)
        return
    if ev is not None and out is not None:  # asynchronous: its Works are recorded when waited on
        works = out if isinstance(out, list) else [out]
        for i, w in enumerate(works):
            sub = dict(ev)
            if name == "batch_isend_irecv" and i < len(ev.get("p2p", [])):
                sub["op"] = ev["p2p"][i]["op"]
                sub["peer"] = ev["p2p"][i]["peer"]
                sub["idx"] = i
            _remember_work(w, sub)
    w, _tls.work = _tls.work, None  # the Work a synchronous call waited on (NCCL: returns early)
    if w is None and _on_cuda(spec, args, kwargs):
        w = _StreamMark()  # NCCL synced at C++ level: the stream says when it is really done
    if w is not None and not _completed(w):
        _in_flight(w, call_id, name)
    elif name in _OBJECT_COLLECTIVES:
        emit({"ev": "exit", "rank": _rank, "id": call_id, "op": name, **_object_devices(spec, args, kwargs)})
    else:
        os.write(_fd, events.exit_line(_rank, call_id, name, time.time()))


# where the tensors inside the objects of an object collective live: what this rank sent, what it got from whom
# (a pickled tensor comes back on the device it left from: the root of the cross-device bug)
_OBJECT_COLLECTIVES = {"all_gather_object": ("obj", "object_list"), "gather_object": ("obj", "object_gather_list"),
                       "broadcast_object_list": (None, "object_list"),
                       "scatter_object_list": (None, "scatter_object_output_list")}


def _tensor_devices(obj, out: set, depth: int = 0, budget: list | None = None) -> set:
    budget = [2000] if budget is None else budget
    if budget[0] <= 0 or depth > 4:
        return out
    budget[0] -= 1
    if isinstance(obj, torch.Tensor):
        out.add(str(obj.device))
    elif isinstance(obj, dict):
        for v in obj.values():
            _tensor_devices(v, out, depth + 1, budget)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _tensor_devices(v, out, depth + 1, budget)
    return out


def _object_devices(spec: _Spec, args: tuple, kwargs: dict) -> dict:
    sent_arg, got_arg = _OBJECT_COLLECTIVES[spec.name]
    fields = {}
    sent = _tensor_devices(spec.arg(args, kwargs, sent_arg), set()) if sent_arg else set()
    if sent:
        fields["sent_devices"] = sorted(sent)
    got = spec.arg(args, kwargs, got_arg)
    if isinstance(got, list) and got:
        info = group_info(spec.arg(args, kwargs, "group"))
        members = info[1] if info else list(range(len(got)))
        src = spec.arg(args, kwargs, "src")
        per = {}
        for i, o in enumerate(got):
            devs = _tensor_devices(o, set())
            if devs:
                frm = src if spec.name == "broadcast_object_list" and src is not None else (
                    members[i] if i < len(members) and spec.name != "scatter_object_list" else None)
                per[str(frm)] = sorted(devs)
        if per:
            fields["got_devices"] = per
    return fields


def _exit_anyway(call_id: int, op: str, e: Exception) -> None:
    """The call returned but the tracer's bookkeeping of it failed: write its exit all the same (without it the
    rank would look inside the call forever, a false hang), then say what failed."""
    try:
        os.write(_fd, events.exit_line(_rank, call_id, op, time.time()))
        emit({"ev": "tracer_error", "rank": _rank, "id": call_id, "op": op, "error": repr(e)[:2000]})
    except Exception:  # noqa: BLE001  the trace file cannot be written at all: nothing more to record; the call worked
        pass


def _exit_error(call_id: int, op: str, e: BaseException) -> None:
    try:
        emit({"ev": "exit", "rank": _rank, "id": call_id, "op": op, "error": f"{type(e).__name__}: {e}"[:2000]})
    except Exception:  # noqa: BLE001  the trace file cannot be written: the user's own error matters more than ours
        pass


def _tracer_error(op: str, e: Exception) -> None:
    try:
        emit({"ev": "tracer_error", "rank": _rank, "op": op, "error": repr(e)[:2000]})
    except Exception:  # noqa: BLE001  the trace file cannot be written: the call runs untraced all the same
        pass


def _wrap(spec: _Spec, fn):
    @functools.wraps(fn)
    def traced(*args, **kwargs):
        if _fd is None or getattr(_tls, "depth", 0):
            return fn(*args, **kwargs)
        _tls.depth = 1
        try:
            try:
                call_id, ev = _enter(spec, args, kwargs)
            except Exception as e:  # noqa: BLE001  the tracer must never break the user's call: it runs untraced
                call_id = ev = None
                _tracer_error(spec.name, e)
            _tls.work = None
            try:
                out = fn(*args, **kwargs)
            except BaseException as e:
                if call_id is not None:
                    _exit_error(call_id, spec.name, e)
                raise
            if call_id is not None:
                try:
                    _returned(spec, call_id, ev, args, kwargs, out)
                except Exception as e:  # noqa: BLE001  the call worked: our bookkeeping must not make it fail
                    _exit_anyway(call_id, spec.name, e)
            return out
        finally:
            _tls.depth = 0

    traced.__sandbox_traced__ = fn
    return traced


# NCCL collectives return to Python once enqueued on the GPU stream; until their Work completes they are still
# "inside" the collective as far as other ranks are concerned. Such a call's exit is written with "inflight", and
# a watcher thread writes "done" when the GPU has finished it, so a stuck NCCL collective stays visible.
_inflight: dict[int, object] = {}
_watcher: threading.Thread | None = None


class _StreamMark:
    """Completion of everything queued so far on the current CUDA stream, as a Work-like is_completed()."""

    def __init__(self):
        self.event = torch.cuda.Event()
        self.event.record()

    def is_completed(self) -> bool:
        return self.event.query()


def _on_cuda(spec: _Spec, args: tuple, kwargs: dict) -> bool:
    if spec.op.data is None:
        return False
    x = spec.arg(args, kwargs, spec.op.data)
    if isinstance(x, (list, tuple)) and x:
        x = x[0]
    return isinstance(x, torch.Tensor) and x.is_cuda


def _completed(work) -> bool:
    try:
        return work.is_completed()
    except Exception:  # noqa: BLE001  a Work that cannot tell is treated as finished
        return True


def _in_flight(work, call_id: int, op: str) -> None:
    global _watcher
    _inflight[call_id] = work
    if _watcher is None:
        _watcher = threading.Thread(target=_watch_inflight, name="sandbox-inflight", daemon=True)
        _watcher.start()
    emit({"ev": "exit", "rank": _rank, "id": call_id, "op": op, "inflight": True})


def _watch_inflight() -> None:
    while True:
        time.sleep(0.02)
        for call_id, work in list(_inflight.items()):
            if _completed(work):
                _inflight.pop(call_id, None)
                emit({"ev": "done", "rank": _rank, "id": call_id})


def _enter_wait(of: dict) -> int:
    """Write the enter event of a `wait` on the Work of the asynchronous call `of`; returns its id."""
    site, func = _site(_user_frame(2))
    ev = {"ev": "enter", "rank": _rank, "id": None, "op": "wait", "of": of["op"], "of_id": of["id"],
          "site": site, "func": func}
    if "idx" in of:
        ev["of_idx"] = of["idx"]
    for k in ("gname", "group", "seq", "peer", "shapes", "dtypes", "sig", "root"):
        if k in of:
            ev[k] = of[k]
    with _lock:
        ev["id"] = call_id = next(_ids)
        ev["t"] = time.time()
        os.write(_fd, events.encode(ev))
    return call_id


def _wrap_wait(orig):
    @functools.wraps(orig)
    def wait(self, *args, **kwargs):
        if getattr(_tls, "depth", 0):
            _tls.work = self  # a traced synchronous call waiting on its own Work
            return orig(self, *args, **kwargs)
        hit = _outstanding.pop(id(self), None) if _fd is not None else None
        if hit is None or hit[0] is not self:
            return orig(self, *args, **kwargs)
        try:
            call_id = _enter_wait(hit[1])
        except Exception as e:  # noqa: BLE001  the tracer must never break the user's wait: it runs untraced
            call_id = None
            _tracer_error("wait", e)
        _tls.depth = 1
        try:
            out = orig(self, *args, **kwargs)
        except BaseException as e:
            if call_id is not None:
                _exit_error(call_id, "wait", e)
            raise
        finally:
            _tls.depth = 0
        if call_id is not None:
            try:
                if not _completed(self):
                    _in_flight(self, call_id, "wait")
                else:
                    os.write(_fd, events.exit_line(_rank, call_id, "wait", time.time()))
            except Exception as e:  # noqa: BLE001  the wait worked: our bookkeeping must not make it fail
                _exit_anyway(call_id, "wait", e)
        return out

    wait.__sandbox_traced__ = orig
    return wait


def forget_groups() -> None:
    """Drop every reference the tracer holds to process groups and their Works, so a destroyed group is freed
    now and not during interpreter shutdown (where gloo's threads would be torn down in the wrong order)."""
    _groups.clear()
    _outstanding.clear()
    _inflight.clear()
    _static.clear()


def _patch(owner, attr: str, wrapper) -> None:
    _patched.append((owner, attr, vars(owner).get(attr, _MISSING), wrapper))
    setattr(owner, attr, wrapper)


def install() -> None:
    """Wrap torch.distributed's public calls and Work.wait (idempotent). Events are written only once `start`
    gives a sink. Argument positions are read here, once, from the signatures of the functions wrapped."""
    global _installed
    if _installed:
        return
    for name, op in OPS.items():
        fn = getattr(c10d, name, None)
        if fn is None or hasattr(fn, "__sandbox_traced__"):
            continue
        traced = _wrap(_Spec(name, op, fn), fn)
        if getattr(dist, name, None) is fn:
            _patch(dist, name, traced)
        _patch(c10d, name, traced)
    Work = torch._C._distributed_c10d.Work
    if not hasattr(Work.wait, "__sandbox_traced__"):
        _patch(Work, "wait", _wrap_wait(Work.wait))
    _installed = True


def uninstall() -> None:
    """Put back every function `install` replaced (idempotent). An attribute someone else has replaced since is
    left as they set it: putting ours back would undo their change."""
    global _installed
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
    was_installed, patched, sink = _installed, list(_patched), set_sink(None)
    uninstall()
    try:
        yield
    finally:
        for owner, attr, _before, wrapper in patched:  # the same wrappers, so references taken before stay valid
            _patch(owner, attr, wrapper)
        _installed = was_installed
        set_sink(sink)


def start(path: str, rank: int, **meta) -> None:
    """Write the trace directory's meta.json, open this rank's trace file and write its first event."""
    global _fd, _rank
    _rank = rank
    events.write_meta(os.path.dirname(os.path.abspath(path)), torch=torch.__version__,
                      world_size=meta.get("world_size"))
    _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    emit({"ev": "hello", "rank": rank, "pid": os.getpid(), "host": socket.gethostname(),
          "torch": torch.__version__, "format": events.FORMAT_VERSION, **meta})


def finish(outcome: str, **fields) -> None:
    """The rank's last event: how its own code ended (a crash writes none)."""
    emit({"ev": "end", "rank": _rank, "outcome": outcome, **fields})


def _is_sandbox_frame(path: str) -> bool:
    """A frame of the sandbox's own machinery (or runpy's, which the sandbox uses to run scripts)."""
    return path in _paths.PLUMBING_FILES or path == "<frozen runpy>" or os.path.basename(path) == "runpy.py"


def _drop_sandbox_frames(te: traceback.TracebackException, seen: set) -> None:
    if id(te) in seen:
        return
    seen.add(id(te))
    kept = [f for f in te.stack if not _is_sandbox_frame(f.filename)]
    if kept:  # an error of the sandbox itself (nothing else on the stack) keeps every frame
        te.stack = traceback.StackSummary.from_list(kept)
    for other in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if other is not None:
            _drop_sandbox_frames(other, seen)


def user_traceback(exc: BaseException) -> str:
    """The traceback of `exc` as the user's own program would print it: without the sandbox's frames (the tracer's
    wrappers, the rank's runner, runpy), in chained exceptions too. Torch's frames stay."""
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    _drop_sandbox_frames(te, set())
    return "".join(te.format())


def error_site(exc: BaseException) -> str | None:
    """file:line of the innermost frame of the user's code in an exception's traceback (not the standard library's:
    an error raised through a `with` block is reported at the user's line in it, not in contextlib)."""
    tb, site = exc.__traceback__, None
    while tb is not None:
        fn = tb.tb_frame.f_code.co_filename
        if not (is_plumbing(fn) or _paths.is_stdlib(fn)):
            site = f"{_display(fn)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return site


def _main(argv: list[str]) -> int:
    import argparse
    import faulthandler
    import runpy
    import signal

    p = argparse.ArgumentParser(prog="python -m sandbox.trace",
                                description="Run a script with every torch.distributed call traced (use under torchrun).")
    p.add_argument("--trace-dir", default="sandbox-traces", help="where each rank writes rank-<RANK>.jsonl")
    p.add_argument("-m", dest="module", action="store_true", help="run a module (like python -m) instead of a file")
    p.add_argument("target")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    os.makedirs(a.trace_dir, exist_ok=True)
    install()
    start(os.path.join(a.trace_dir, f"rank-{rank}.jsonl"), rank,
          world_size=int(os.environ.get("WORLD_SIZE", "1")), local_rank=int(os.environ.get("LOCAL_RANK", "0")),
          group_rank=os.environ.get("GROUP_RANK"), launcher="torchrun" if "TORCHELASTIC_RUN_ID" in os.environ else "?")
    # torchrun ends its workers with SIGTERM: leave the Python stack behind first, even if blocked inside gloo
    stack = open(os.path.join(a.trace_dir, f"stack-{rank}.txt"), "w")
    faulthandler.register(signal.SIGUSR1, file=stack, all_threads=True)
    faulthandler.register(signal.SIGTERM, file=stack, all_threads=True, chain=True)
    faulthandler.enable(file=sys.stderr)
    sys.argv = [a.target] + a.args
    try:
        if a.module:
            runpy.run_module(a.target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(a.target)))
            runpy.run_path(a.target, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finish("ok" if code == 0 else "exit", exit_code=code)
        raise
    except Exception as e:  # noqa: BLE001  the script's own error: printed as Python would, without our frames
        shown = user_traceback(e)
        finish("error", error={"type": type(e).__name__, "message": str(e)[:2000], "traceback": shown[-8000:],
                               "site": error_site(e)})
        sys.stderr.write(shown)
        return 1
    except BaseException as e:  # KeyboardInterrupt: recorded, then left to end the process as it would
        finish("error", error={"type": type(e).__name__, "message": str(e)[:2000],
                               "traceback": user_traceback(e)[-8000:], "site": error_site(e)})
        raise
    else:
        finish("ok", exit_code=0)
    finally:
        forget_groups()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
