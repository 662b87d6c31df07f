"""What a call is, read from its arguments: the fields of its enter event (op, group, shapes, dtypes, devices,
root or peer, reduce op, splits, the user's call site), and where the tensors inside an object collective's objects
live. The fields and what must match across ranks are `sandbox.calls`'; this module only reads them off torch's
objects.
"""
from __future__ import annotations

import inspect
import itertools
import os
import socket
import sys

import torch
import torch.distributed as dist

from sandbox import calls, compat
from sandbox._paths import is_plumbing, shown_path
from sandbox.calls import Op

groups: dict[int, tuple] = {}       # id(group) -> (group, name, global ranks); holding the group keeps its id its own
_new_groups = itertools.count()     # this rank's new_group calls
_display_cache: dict[str, str] = {}


class Spec:
    """An op of `calls.OPS` bound to the function it wraps: where each argument sits, from that function's
    signature (so a call made positionally is recorded like one made by keyword, on every torch this runs with)."""

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

    def given(self, args: tuple, kwargs: dict, name: str, value) -> tuple[tuple, dict]:
        """The arguments of a call with `name` set to `value`, where it was passed or by keyword."""
        i = self.pos.get(name)
        if i is not None and i < len(args):
            return args[:i] + (value,) + args[i + 1:], kwargs
        return args, {**kwargs, name: value}


def user_frame(depth: int):
    """The first frame outside torch and the sandbox's plumbing, `depth` frames above the caller."""
    f = sys._getframe(depth + 1)
    while f is not None and is_plumbing(f.f_code.co_filename):
        f = f.f_back
    return f


def display(filename: str) -> str:
    """A file as a site shows it (`sandbox._paths.shown_path`, cached: the tracer asks on every new call site)."""
    shown = _display_cache.get(filename)
    if shown is None:
        shown = _display_cache[filename] = shown_path(filename)
    return shown


def site(frame) -> tuple[str, str]:
    """(file:line, function) of a frame."""
    if frame is None:
        return "?", "?"
    return f"{display(frame.f_code.co_filename)}:{frame.f_lineno}", frame.f_code.co_name


def tensor_info(x):
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
            g = dist.group.WORLD
        hit = groups.get(id(g))
        if hit is not None and hit[0] is g:
            return hit[1], hit[2]
        if g is dist.GroupMember.NON_GROUP_MEMBER:
            return None
        info = (g, g.group_name, list(dist.get_process_group_ranks(g)))
        groups[id(g)] = info
        return info[1], info[2]
    except Exception:  # noqa: BLE001  not a group torch knows (destroyed, or a wrong argument the call will reject)
        return None


def backend_seq(g) -> int | None:
    """The group's own count of collectives so far (c10d's sequence number, which a framework's C++ calls, DDP's
    gradient all_reduces, advance too): where a rank leaves no Flight Recorder dump (it crashed), its Python calls
    are still placed among the others' recorded ones by it. None where the backend keeps none."""
    return compat.sequence_number(g)


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


def _counts(t, sizes, members: int | None) -> list[int] | None:
    """Elements of tensor t going to (or coming from) each member: rows of its first dim by `sizes`, else even."""
    if not isinstance(t, torch.Tensor):
        return None
    if sizes:
        row = t.numel() // t.shape[0] if t.dim() and t.shape[0] else 0
        return [int(s) * row for s in sizes]
    return [t.numel() // members] * members if members else None


def _splits(spec: Spec, arg, info) -> list | None:
    """[sent, received] elements per member of the group, for all_to_all and all_to_all_single."""
    if spec.name == "all_to_all":
        ins, outs = arg(spec.op.data), arg(spec.op.out)
        if isinstance(ins, (list, tuple)) and isinstance(outs, (list, tuple)):
            return [[t.numel() for t in ins], [t.numel() for t in outs]]
        return None
    members = len(info[1]) if info else None
    sent = _counts(arg(spec.op.data), arg("input_split_sizes"), members)
    got = _counts(arg(spec.op.out), arg("output_split_sizes"), members)
    return [sent, got] if sent is not None and got is not None else None


def describe(spec: Spec, args: tuple, kwargs: dict, frame) -> dict:
    """The static fields of a call's enter event (all but id, time and seq)."""
    name, op = spec.name, spec.op

    def arg(argname, default=None):
        return spec.arg(args, kwargs, argname, default)

    where, func = site(frame)
    ev = {"op": name, "site": where, "func": func}
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
    group = arg("group")
    info = group_info(group)
    if info is not None:
        ev["gname"], ev["group"] = info
    elif group is not None and group is dist.GroupMember.NON_GROUP_MEMBER:
        ev["non_member"] = True  # what new_group returned to a rank outside the group: torch warns, moves nothing
    if op.data is not None:
        shapes, dtypes, devices = tensor_info(arg(op.data))
        if shapes is not None:
            ev.update(shapes=shapes, dtypes=dtypes, devices=devices)
    if name == "broadcast_object_list" and isinstance(arg("object_list"), list):
        ev["length"] = len(arg("object_list"))  # it broadcasts the objects' sizes first: one per list entry
    if op.root is not None:
        root = arg(op.root)
        if root is None:
            in_group = arg("group_" + op.root)
            if isinstance(in_group, int) and info is not None and 0 <= in_group < len(info[1]):
                root = info[1][in_group]  # recorded as a global rank, whichever way it was given
                ev["group_root"] = in_group  # ...and as given: a rank within the group
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
        red = arg(op.redop) if op.redop is not None else None
        if red is not None:
            ev["redop"] = getattr(red, "name", None) or str(red)
        if op.out is not None:
            splits = _splits(spec, arg, info)
            if splits is not None:
                ev["splits"] = splits
        ev["sig"] = calls.signature(ev)
    elif name == "batch_isend_irecv":
        ev["p2p"] = [{"op": getattr(getattr(o, "op", None), "__name__", "?"), "peer": getattr(o, "peer", None),
                      "shapes": tensor_info(getattr(o, "tensor", None))[0],
                      **_p2p_group(o)} for o in arg("p2p_op_list") or ()]
    if op.returns_work or arg("async_op", False):
        ev["async"] = True
    return ev


def _p2p_group(o) -> dict:
    """A P2POp's group's global ranks, where it names a group of its own ({} for the world's)."""
    group = getattr(o, "group", None)
    info = group_info(group) if group is not None else None
    return {"group": info[1]} if info is not None else {}


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


def object_devices(spec: Spec, args: tuple, kwargs: dict) -> dict:
    """Where the tensors inside an object collective's objects live: what this rank sent (`sent_devices`) and what
    it got from whom (`got_devices`); a pickled tensor comes back on the device it left from (the cross-device
    bug's root)."""
    sent_arg, got_arg = spec.op.objects
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
