"""The tracer: every public torch.distributed call of a rank, recorded on entry and on exit.

Each call writes one JSON line before it starts ("enter") and one after it returns or raises ("exit") to a
per-rank file opened with O_APPEND. The enter line is in the kernel before the call can block, so it reaches
whoever reads the file even if the call never returns or the process is killed.

An event carries the op, the group (its global ranks and its name), the per-group sequence number of
collectives, the shapes/dtypes/devices of the rank's contribution, the peer of point-to-point ops, and the
user's call site (the first frame outside torch and the sandbox's plumbing). Calls that torch makes from inside
a traced call (gather_object calling all_gather, ...) are not recorded twice.

Inside the sandbox `sandbox.rank` installs it. Under torchrun use the CLI:

    torchrun --nproc-per-node 4 -m sandbox.trace --trace-dir traces/ train.py --lr 0.1
    python -m sandbox.diagnose traces/
"""
from __future__ import annotations

import functools
import json
import os
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

# op -> (kind, index and name of the argument that is this rank's contribution, root argument, group argument index)
# kind: "coll" (counts in the group's sequence), "p2p", "obj-p2p", "init", "new_group", "local"
_SPECS: dict[str, tuple] = {
    "all_reduce": ("coll", 0, "tensor", None),
    "all_reduce_coalesced": ("coll", 0, "tensors", None),
    "all_gather": ("coll", 1, "tensor", None),
    "all_gather_into_tensor": ("coll", 1, "input_tensor", None),
    "reduce_scatter": ("coll", 1, "input_list", None),
    "reduce_scatter_tensor": ("coll", 1, "input", None),
    "all_to_all": ("coll", 1, "input_tensor_list", None),
    "all_to_all_single": ("coll", 1, "input", None),
    "broadcast": ("coll", 0, "tensor", "src"),
    "reduce": ("coll", 0, "tensor", "dst"),
    "gather": ("coll", 0, "tensor", "dst"),
    "scatter": ("coll", 0, "tensor", "src"),
    "barrier": ("coll", None, None, None),
    "monitored_barrier": ("coll", None, None, None),
    "all_gather_object": ("coll", None, None, None),
    "gather_object": ("coll", None, None, "dst"),
    "broadcast_object_list": ("coll", None, None, "src"),
    "scatter_object_list": ("coll", None, None, "src"),
    "send": ("p2p", 0, "tensor", "dst"),
    "recv": ("p2p", 0, "tensor", "src"),
    "isend": ("p2p", 0, "tensor", "dst"),
    "irecv": ("p2p", 0, "tensor", "src"),
    "send_object_list": ("p2p", None, None, "dst"),
    "recv_object_list": ("p2p", None, None, "src"),
    "batch_isend_irecv": ("p2p", None, None, None),
    "init_process_group": ("init", None, None, None),
    "new_group": ("new_group", None, None, None),
    "new_subgroups": ("local", None, None, None),
    "new_subgroups_by_enumeration": ("local", None, None, None),
    "destroy_process_group": ("local", None, None, None),
}
SEND_OPS = {"send", "isend", "send_object_list"}
RECV_OPS = {"recv", "irecv", "recv_object_list"}

_tls = threading.local()
_fd: int | None = None
_rank: int | None = None
_ids = 0
_seq: dict[str, int] = {}
_new_groups = 0
_groups: dict[int, tuple] = {}
_outstanding: dict[int, tuple] = {}
_skip_cache: dict[str, bool] = {}
_display_cache: dict[str, str] = {}
# the static part of an enter event (everything but id, time and seq), as a JSON fragment, keyed by what it
# depends on: op, call site, and the arguments' shapes/dtypes/devices/groups. Cleared whenever groups change.
_static: dict[tuple, tuple] = {}
_STATIC_MAX = 4096
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
# the sandbox's plumbing: frames in these files are never the user's call site
_PLUMBING = {os.path.join(_HERE, f) for f in ("trace.py", "rank.py", "_zygote.py", "launch.py", "primitives.py")}
_MAX_OUTSTANDING = 10000
_installed = False


def _skip(filename: str) -> bool:
    hit = _skip_cache.get(filename)
    if hit is None:
        hit = (filename.startswith(_TORCH_DIR) or filename in _PLUMBING or filename.startswith("<frozen")
               or os.path.basename(filename) == "runpy.py")
        _skip_cache[filename] = hit
    return hit


def _user_frame(depth: int):
    f = sys._getframe(depth + 1)
    while f is not None and _skip(f.f_code.co_filename):
        f = f.f_back
    return f


def _display(filename: str) -> str:
    shown = _display_cache.get(filename)
    if shown is None:
        try:
            rel = os.path.relpath(filename)
            shown = rel if not rel.startswith("..") else filename
        except ValueError:
            shown = filename
        _display_cache[filename] = shown
    return shown


def call_site(depth: int = 2) -> tuple[str, str]:
    """(file:line, function) of the first frame outside torch and the sandbox's plumbing."""
    f = _user_frame(depth)
    if f is None:
        return "?", "?"
    return f"{_display(f.f_code.co_filename)}:{f.f_lineno}", f.f_code.co_name


def emit(event: dict) -> None:
    """Append one event line to this rank's trace (no-op when the tracer has no sink)."""
    if _fd is None:
        return
    event.setdefault("t", time.time())
    os.write(_fd, (json.dumps(event, separators=(",", ":"), default=str) + "\n").encode())


def _arg(args, kwargs, idx, name):
    if idx is not None and len(args) > idx:
        return args[idx]
    return kwargs.get(name)


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
    except Exception:
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


def _describe(name, kind, spec, args, kwargs, frame) -> dict:
    _, idx, argname, rootname = spec
    site, func = (f"{_display(frame.f_code.co_filename)}:{frame.f_lineno}", frame.f_code.co_name) if frame else ("?", "?")
    ev = {"ev": "enter", "rank": _rank, "op": name, "site": site, "func": func}
    if kind == "init":
        bound = dict(zip(("backend", "init_method", "timeout", "world_size", "rank", "store"), args))
        bound.update(kwargs)
        ws = bound.get("world_size", -1)
        ws = int(ws if ws not in (None, -1) else os.environ.get("WORLD_SIZE", -1))
        ev.update(backend=str(bound.get("backend")),
                  init_method=bound.get("init_method") or ("env://" if bound.get("store") is None else None),
                  endpoint=_endpoint(bound.get("init_method"), bound.get("store")), world_size=ws,
                  MASTER_ADDR=os.environ.get("MASTER_ADDR"), MASTER_PORT=os.environ.get("MASTER_PORT"),
                  device_id=str(bound["device_id"]) if bound.get("device_id") is not None else None,
                  timeout_s=bound["timeout"].total_seconds() if bound.get("timeout") is not None else None,
                  group=list(range(ws)) if ws > 0 else None, gname="0", seq=0)
        return ev
    if kind == "new_group":
        global _new_groups
        ranks = _arg(args, kwargs, 0, "ranks")
        ev["ranks"] = sorted(ranks) if ranks is not None and kwargs.get("sort_ranks", True) else (
            list(ranks) if ranks is not None else "all")
        ev["index"] = _new_groups
        _new_groups += 1
        if kwargs.get("use_local_synchronization"):
            ev["local_sync"] = True
        return ev
    if kind == "local":
        return ev
    group = kwargs.get("group")
    if group is None and name not in ("batch_isend_irecv",):
        gi = _GROUP_INDEX.get(name)
        if gi is not None and len(args) > gi:
            group = args[gi]
    info = group_info(group)
    if info is not None:
        ev["gname"], ev["group"] = info
    if argname is not None:
        shapes, dtypes, devices = _tensor_info(_arg(args, kwargs, idx, argname))
        if shapes is not None:
            ev.update(shapes=shapes, dtypes=dtypes, devices=devices)
    if rootname is not None:
        root = kwargs.get(rootname)
        if root is None:
            ri = _ROOT_INDEX.get(name)
            if ri is not None and len(args) > ri:
                root = args[ri]
        if root is None and name not in ("send_object_list", "recv_object_list", "recv", "irecv"):
            root = 0 if name in ("broadcast_object_list", "scatter_object_list", "gather_object") else None
        if kind == "p2p":
            ev["peer"] = root
            tag = kwargs.get("tag", args[3] if len(args) > 3 and name in ("send", "recv", "isend", "irecv") else 0)
            if tag:
                ev["tag"] = tag
        else:
            ev["root"] = root
    if kind == "coll":
        ev["sig"] = f"{name}|{ev.get('root')}|{ev.get('shapes')}|{ev.get('dtypes')}"
    elif name == "batch_isend_irecv":
        ops = _arg(args, kwargs, 0, "p2p_op_list") or []
        ev["p2p"] = [{"op": getattr(getattr(o, "op", None), "__name__", "?"), "peer": getattr(o, "peer", None),
                      "shapes": _tensor_info(getattr(o, "tensor", None))[0]} for o in ops]
    if len(args) > _ASYNC_INDEX.get(name, 99) and args[_ASYNC_INDEX[name]] or kwargs.get("async_op") \
            or name in ("isend", "irecv", "batch_isend_irecv"):
        ev["async"] = True
    return ev


# positional index of `group`, of the root and of `async_op` for each op (torch 2.11-2.13 signatures)
_GROUP_INDEX = {"all_reduce": 2, "all_gather": 2, "all_gather_into_tensor": 2, "reduce_scatter": 3,
                "reduce_scatter_tensor": 3, "all_to_all": 2, "all_to_all_single": 4, "broadcast": 2, "reduce": 3,
                "gather": 3, "scatter": 3, "barrier": 0, "monitored_barrier": 0, "all_gather_object": 2,
                "gather_object": 3, "broadcast_object_list": 2, "scatter_object_list": 3, "send": 2, "recv": 2,
                "isend": 2, "irecv": 2, "send_object_list": 2, "recv_object_list": 2, "all_reduce_coalesced": 2}
_ROOT_INDEX = {"broadcast": 1, "reduce": 1, "gather": 2, "scatter": 2, "gather_object": 2,
               "broadcast_object_list": 1, "scatter_object_list": 2, "send": 1, "recv": 1, "isend": 1, "irecv": 1,
               "send_object_list": 1, "recv_object_list": 1}
_ASYNC_INDEX = {"all_reduce": 3, "all_gather": 3, "all_gather_into_tensor": 3, "reduce_scatter": 4,
                "reduce_scatter_tensor": 4, "all_to_all": 3, "all_to_all_single": 5, "broadcast": 3, "reduce": 4,
                "gather": 4, "scatter": 4, "barrier": 1, "all_reduce_coalesced": 3}


def _key(v):
    """A hashable summary of an argument, as far as the event depends on it."""
    if isinstance(v, torch.Tensor):
        return (v.shape, v.dtype, v.device)
    if isinstance(v, (list, tuple)):
        return tuple(_key(x) for x in v)
    if v is None or isinstance(v, (int, float, str, bool)):
        return v
    try:
        hash(v)
        return (type(v), v) if not isinstance(v, dist.ProcessGroup) else ("pg", id(v))
    except TypeError:
        return ("obj", id(v))


def _enter(name, kind, spec, cacheable, args, kwargs) -> dict:
    """Write the enter event of a call; returns its fields (only the cheap ones on the fast path)."""
    frame = _user_frame(2)
    hit = key = None
    if cacheable:
        key = (name, frame.f_code if frame else None, frame.f_lineno if frame else None, _key(args),
               _key(tuple(kwargs.items())) if kwargs else None)
        hit = _static.get(key)
    if hit is None:
        ev = _describe(name, kind, spec, args, kwargs, frame)
        static = {k: v for k, v in ev.items() if k not in ("ev", "rank", "t", "id", "seq")}
        hit = (json.dumps(static, separators=(",", ":"), default=str)[1:-1].encode(), static.get("gname", "?"),
               static)
        if key is not None:
            if len(_static) >= _STATIC_MAX:
                _static.clear()
            _static[key] = hit
        if not cacheable:  # rare calls (init, new_group, object collectives) keep their full event
            ev["id"] = _ids
            if kind == "coll":
                _seq[hit[1]] = _seq.get(hit[1], 0) + 1
                ev["seq"] = _seq[hit[1]]
            emit(ev)
            return ev
    frag, gname, static = hit
    if kind == "coll":
        seq = _seq[gname] = _seq.get(gname, 0) + 1
        os.write(_fd, b'{"ev":"enter","rank":%d,"id":%d,"t":%.6f,"seq":%d,%s}\n'
                 % (_rank, _ids, time.time(), seq, frag))
        return {**static, "id": _ids, "seq": seq} if static.get("async") else {"id": _ids}
    os.write(_fd, b'{"ev":"enter","rank":%d,"id":%d,"t":%.6f,%s}\n' % (_rank, _ids, time.time(), frag))
    return {**static, "id": _ids} if static.get("async") else {"id": _ids}


def _remember_work(work, ev) -> None:
    if len(_outstanding) >= _MAX_OUTSTANDING:  # never waited on: forget the oldest rather than grow forever
        _outstanding.pop(next(iter(_outstanding)))
    _outstanding[id(work)] = (work, ev)


def _wrap(name: str, fn):
    spec = _SPECS[name]
    kind = spec[0]

    cacheable = kind in ("coll", "p2p") and "object" not in name and name != "batch_isend_irecv"

    @functools.wraps(fn)
    def traced(*args, **kwargs):
        if _fd is None or getattr(_tls, "depth", 0):
            return fn(*args, **kwargs)
        global _ids
        _tls.depth = 1
        ev = None
        try:
            try:
                _ids += 1
                ev = _enter(name, kind, spec, cacheable, args, kwargs)
            except Exception as e:  # the tracer must never break the user's call
                ev = None
                try:
                    emit({"ev": "tracer_error", "rank": _rank, "op": name, "error": repr(e)})
                except Exception:  # noqa: BLE001
                    pass
            _tls.work = None
            try:
                out = fn(*args, **kwargs)
            except BaseException as e:
                if ev is not None:
                    emit({"ev": "exit", "rank": _rank, "id": ev["id"], "op": name,
                          "error": f"{type(e).__name__}: {e}"[:2000]})
                raise
            try:  # the call worked: a failure of the tracer's own bookkeeping must not make it fail
                if ev is not None:
                    if kind in ("init", "new_group", "local"):
                        _static.clear()  # groups changed: cached group names may be stale
                        if name == "destroy_process_group":
                            forget_groups()
                        done = {"ev": "exit", "rank": _rank, "id": ev["id"], "op": name}
                        if kind == "init":
                            done["world_size"] = dist.get_world_size()
                            done["group"] = list(range(done["world_size"]))
                        elif kind == "new_group":
                            info = group_info(out) if out is not None else None
                            done["gname"], done["group"] = info if info else (None, None)
                        emit(done)
                    else:
                        if ev.get("async") and out is not None:
                            works = out if isinstance(out, list) else [out]
                            for i, w in enumerate(works):
                                sub = dict(ev)
                                if name == "batch_isend_irecv" and i < len(ev.get("p2p", [])):
                                    sub["op"] = ev["p2p"][i]["op"]
                                    sub["peer"] = ev["p2p"][i]["peer"]
                                    sub["idx"] = i
                                _remember_work(w, sub)
                        w, _tls.work = _tls.work, None  # the Work a synchronous call waited on (NCCL: returns early)
                        if w is None and kind != "local" and _on_cuda(spec, args, kwargs):
                            w = _StreamMark()  # NCCL synced at C++ level: the stream says when it is really done
                        if w is not None and not _completed(w):
                            _in_flight(w, ev["id"], name)
                        else:
                            os.write(_fd, b'{"ev":"exit","rank":%d,"id":%d,"op":"%s","t":%.6f}\n'
                                     % (_rank, ev["id"], name.encode(), time.time()))
            except Exception:  # noqa: BLE001
                pass
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


def _on_cuda(spec, args, kwargs) -> bool:
    x = _arg(args, kwargs, spec[1], spec[2]) if spec[2] is not None else None
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
    emit({"ev": "exit", "rank": _rank, "id": call_id, "op": op, "inflight": True})
    if _watcher is None:
        _watcher = threading.Thread(target=_watch_inflight, name="sandbox-inflight", daemon=True)
        _watcher.start()


def _watch_inflight() -> None:
    while True:
        time.sleep(0.02)
        for call_id, work in list(_inflight.items()):
            if _completed(work):
                _inflight.pop(call_id, None)
                emit({"ev": "done", "rank": _rank, "id": call_id})


def _wrap_wait(orig):
    @functools.wraps(orig)
    def wait(self, *args, **kwargs):
        if getattr(_tls, "depth", 0):
            _tls.work = self  # a traced synchronous call waiting on its own Work
            return orig(self, *args, **kwargs)
        hit = _outstanding.pop(id(self), None) if _fd is not None else None
        if hit is None or hit[0] is not self:
            return orig(self, *args, **kwargs)
        global _ids
        of = hit[1]
        _ids += 1
        site, func = call_site(2)
        ev = {"ev": "enter", "rank": _rank, "id": _ids, "op": "wait", "of": of["op"], "of_id": of["id"],
              "site": site, "func": func}
        if "idx" in of:
            ev["of_idx"] = of["idx"]
        for k in ("gname", "group", "seq", "peer", "shapes", "dtypes", "sig", "root"):
            if k in of:
                ev[k] = of[k]
        emit(ev)
        _tls.depth = 1
        try:
            out = orig(self, *args, **kwargs)
        except BaseException as e:
            emit({"ev": "exit", "rank": _rank, "id": ev["id"], "op": "wait", "error": f"{type(e).__name__}: {e}"[:2000]})
            raise
        finally:
            _tls.depth = 0
        if not _completed(self):
            _in_flight(self, ev["id"], "wait")
        else:
            emit({"ev": "exit", "rank": _rank, "id": ev["id"], "op": "wait"})
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


def install() -> None:
    """Wrap torch.distributed's public calls (idempotent). Events are written only once `start` gives a sink."""
    global _installed
    if _installed:
        return
    for name in _SPECS:
        fn = getattr(c10d, name, None)
        if fn is None or hasattr(fn, "__sandbox_traced__"):
            continue
        traced = _wrap(name, fn)
        setattr(c10d, name, traced)
        if getattr(dist, name, None) is fn:
            setattr(dist, name, traced)
    Work = torch._C._distributed_c10d.Work
    if not hasattr(Work.wait, "__sandbox_traced__"):
        Work.wait = _wrap_wait(Work.wait)
    _installed = True


def start(path: str, rank: int, **meta) -> None:
    """Open this rank's trace file and write its first event."""
    global _fd, _rank
    _rank = rank
    _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    emit({"ev": "hello", "rank": rank, "pid": os.getpid(), "host": socket.gethostname(),
          "torch": torch.__version__, **meta})


def finish(outcome: str, **fields) -> None:
    """The rank's last event: how its own code ended (a crash writes none)."""
    emit({"ev": "end", "rank": _rank, "outcome": outcome, **fields})


def _main(argv: list[str]) -> int:
    import argparse
    import faulthandler
    import runpy
    import signal
    import traceback

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
    except BaseException as e:
        finish("error", error={"type": type(e).__name__, "message": str(e)[:2000],
                               "traceback": traceback.format_exc()[-8000:], "site": _error_site(e)})
        raise
    else:
        finish("ok", exit_code=0)
    finally:
        forget_groups()
    return 0


def _error_site(exc: BaseException) -> str | None:
    """file:line of the innermost frame of the user's code in an exception's traceback."""
    tb, site = exc.__traceback__, None
    while tb is not None:
        fn = tb.tb_frame.f_code.co_filename
        if not _skip(fn):
            site = f"{os.path.relpath(fn) if not os.path.relpath(fn).startswith('..') else fn}:{tb.tb_lineno}"
        tb = tb.tb_next
    return site


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
