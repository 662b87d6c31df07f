"""The usual helpers of a training loop, on top of torch.distributed: who am I, how many are we, and the moves every
data-parallel script makes. Run inside the ranks (`from sandbox.primitives import *`); `import sandbox` does not
load this module, so the parent process never imports torch.

Who sends what to whom (N ranks; "t" is each rank's own tensor):

    helper                       who sends           who receives     what each rank gets back
    reduce_tensor(t, op)         every rank its t    every rank       the sum (or mean) of all the t, a new tensor
    gather_tensor(t, dst)        every rank its t    rank dst         dst: [t of rank 0, ..., of rank N-1]; others: None
    broadcast_tensor(t, src)     rank src its t      every rank       t itself, overwritten in place with src's values
    barrier()                    nothing             nobody           returns once every rank has called it
    gather_object(obj, dst)      every rank its obj  rank dst         dst: [obj of rank 0, ...]; others: None
    broadcast_object(obj, src)   rank src its obj    every rank       src's obj (the others pass anything, e.g. None)

Without a process group (a plain `python train.py`) they act as the one rank of a world of one: reduce and broadcast
return their input itself, gather returns `[input]`, barrier returns at once. So one script runs both ways.

The pitfalls these helpers decide (each refusal is one sentence, and every rank raises it, so no rank is left
waiting in a collective its peers abandoned):

- mean of an integer or bool tensor: refused (TypeError). The average of integers is not an integer, and silently
  returning floats changes the dtype under you. Reduce with op="sum" and divide yourself, or pass t.float().
- gather_tensor of tensors whose shapes differ across ranks: handled. The ranks first exchange their shapes, pad
  their data to the longest, and rank dst gets every tensor back at its own shape. Different dtypes are refused
  (TypeError naming each rank's dtype).
- broadcast_tensor into a buffer of another shape or dtype than the sender's: refused (ValueError naming both). Raw
  torch.distributed copies bytes: a float64 buffer receiving an int64 reads garbage (184106 arrives as 9.1e-319), a
  [1] buffer receiving a 0-dim tensor works only because the sizes happen to match, and a buffer of another byte
  size kills the receiving ranks under gloo (SIGABRT, "gloo::EnforceNotMet").
- ranks that disagree on dst or src: refused (ValueError naming who passed what).
- reduce_tensor does not compare shapes (it runs once per gradient, every step, so it stays one all_reduce); shapes
  that differ across ranks crash gloo, which the sandbox reports as a collective mismatch.
- which device the object collectives use: torch pickles the object into a byte tensor and moves it through a
  device chosen by the backend: CPU under gloo, `torch.cuda.current_device()` under NCCL, which is cuda:0 on every
  rank unless the script called `torch.cuda.set_device` (NCCL then fails: "Duplicate GPU detected : rank 1 and rank
  0 both on CUDA device"). These helpers run them on `get_device()` (cuda:LOCAL_RANK under NCCL). A tensor inside an
  object comes back on the device it had on the sender (rank 0 receives rank 1's tensor on cuda:1): move it with
  `.to(get_device())` before mixing it with your own. Objects are unpickled: exchange them only with ranks you trust.

The checks of gather_tensor and broadcast_tensor cost two small all_gathers (each rank's dtype, dimensions and root,
then its shape) before the data moves; you will see them in the sandbox's traces and timelines.
See https://pytorch.org/docs/stable/distributed.html for the collectives underneath.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
from typing import NamedTuple

import torch
import torch.distributed as dist

from sandbox.words import ranks as _say_ranks

__all__ = ["is_distributed", "get_rank", "get_world_size", "is_main_process", "get_device", "reduce_tensor",
           "gather_tensor", "broadcast_tensor", "barrier", "gather_object", "broadcast_object"]

_OPS = ("sum", "mean")


def is_distributed() -> bool:
    """True once this process is a rank of an initialised process group."""
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """This process's rank (0 without a process group)."""
    return dist.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    """How many ranks there are (1 without a process group)."""
    return dist.get_world_size() if is_distributed() else 1


def is_main_process() -> bool:
    """True on rank 0, the rank that logs, saves checkpoints and decides for the others."""
    return get_rank() == 0


def get_device() -> torch.device:
    """Where this rank's tensors for collectives live: cuda:LOCAL_RANK under NCCL, the CPU under gloo; without a
    process group, cuda:LOCAL_RANK (LOCAL_RANK defaults to 0) when CUDA is available, else the CPU."""
    cuda = _uses_nccl() if is_distributed() else torch.cuda.is_available()
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")


def reduce_tensor(t: torch.Tensor, op: str = "mean") -> torch.Tensor:
    """Every rank sends its t; every rank receives the element-wise sum (op="sum") or mean (op="mean") of all of
    them, as a new tensor without autograd history (t is left alone). The mean needs a floating-point t; the sum
    of a bool tensor is True where any rank has True."""
    _check_tensor("reduce_tensor", t)
    if op not in _OPS:
        raise ValueError(f"reduce_tensor: op must be 'sum' or 'mean', not {op!r}.")
    if op == "mean" and not (t.is_floating_point() or t.is_complex()):
        raise TypeError(f"reduce_tensor: op='mean' needs a floating-point tensor and this one is {_dtype(t.dtype)} "
                        "(the mean of integers is not an integer); pass t.float(), or use op='sum' and divide by "
                        "get_world_size() yourself.")
    if not is_distributed():
        return t
    out = t.detach().clone(memory_format=torch.contiguous_format)
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    if op == "mean":
        out /= get_world_size()
    return out


def gather_tensor(t: torch.Tensor, dst: int = 0) -> list[torch.Tensor] | None:
    """Every rank sends its t to rank dst. Rank dst receives the list of all of them in rank order, each at the
    shape its rank had (shapes may differ; dtypes may not); the other ranks receive None."""
    _check_tensor("gather_tensor", t)
    _check_rank("gather_tensor", "dst", dst)
    if not is_distributed():
        return [t]
    metas = _exchange(t, dst, "gather_tensor", "dst")
    if len({m.dtype for m in metas}) > 1:
        raise TypeError(f"gather_tensor: the ranks' tensors have different dtypes ({_each(metas, 'dtype')}); "
                        "convert them to one dtype first, e.g. with .float().")
    longest = max(math.prod(m.shape) for m in metas)
    flat = t.detach().reshape(-1)
    flat = torch.cat([flat, flat.new_zeros(longest - flat.numel())])  # pad to the longest: gather moves equal sizes
    if get_rank() != dst:
        dist.gather(flat, dst=dst)
        return None
    bufs = [torch.empty_like(flat) for _ in metas]
    dist.gather(flat, bufs, dst=dst)
    return [b[:math.prod(m.shape)].reshape(m.shape) for b, m in zip(bufs, metas)]


def broadcast_tensor(t: torch.Tensor, src: int = 0) -> torch.Tensor:
    """Rank src sends its t; every other rank receives it into its own t, in place, and every rank returns t.
    Each rank's t must already have src's shape and dtype (its values are overwritten)."""
    _check_tensor("broadcast_tensor", t)
    _check_rank("broadcast_tensor", "src", src)
    if not is_distributed():
        return t
    metas = _exchange(t, src, "broadcast_tensor", "src")
    wrong = [r for r, m in enumerate(metas) if m[:2] != metas[src][:2]]
    if wrong:
        raise ValueError(f"broadcast_tensor: rank {src} sends {_what(metas[src])}, but {_each(metas, 'buffer', wrong)};"
                         " every rank must pass a buffer of the sender's shape and dtype, e.g. "
                         f"torch.zeros({list(metas[src].shape)}, dtype={metas[src].dtype}).")
    buf = t if t.is_contiguous() else t.contiguous()
    dist.broadcast(buf, src=src)
    if buf is not t:
        t.copy_(buf)
    return t


def barrier() -> None:
    """Nobody sends anything: every rank waits here until all ranks have arrived. Every rank must call it."""
    if not is_distributed():
        return
    if _uses_nccl():
        dist.barrier(device_ids=[get_device().index])  # tells NCCL which GPU is this rank's
    else:
        dist.barrier()


def gather_object(obj, dst: int = 0) -> list | None:
    """Every rank sends a picklable obj to rank dst, which receives the list of them in rank order; the other ranks
    receive None. Tensors inside come back on the device they had on their sender."""
    _check_rank("gather_object", "dst", dst)
    if not is_distributed():
        return [obj]
    out = [None] * get_world_size() if get_rank() == dst else None
    with _object_device():
        dist.gather_object(obj, out, dst=dst)
    return out


def broadcast_object(obj=None, src: int = 0):
    """Rank src sends a picklable obj; every rank returns it (the others' obj is ignored: pass None). Tensors
    inside come back on the device they had on rank src."""
    _check_rank("broadcast_object", "src", src)
    if not is_distributed():
        return obj
    box = [obj]
    with _object_device():
        dist.broadcast_object_list(box, src=src)
    return box[0]


# ---- checks shared by the helpers -----------------------------------------------------------------------------

class _Meta(NamedTuple):
    shape: tuple
    dtype: torch.dtype
    root: int


def _uses_nccl() -> bool:
    return "nccl" in str(dist.get_backend())


def _dtype(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


def _check_tensor(fn: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn} needs a torch.Tensor, not {type(t).__name__}; wrap a number with "
                        "torch.tensor(x, device=get_device()).")
    if is_distributed() and dist.get_backend() == "nccl" and t.device.type != "cuda":
        raise ValueError(f"{fn}: NCCL only moves GPU tensors and this one is on {t.device}; use .to(get_device()).")


def _check_rank(fn: str, name: str, r) -> None:
    if not isinstance(r, int) or isinstance(r, bool):
        raise TypeError(f"{fn}: {name} must be a rank number, not {r!r}.")
    if not 0 <= r < get_world_size():
        raise ValueError(f"{fn}: {name}={r} is not a rank of this world of {get_world_size()} (ranks 0 to "
                         f"{get_world_size() - 1}).")


@functools.lru_cache(maxsize=None)
def _all_dtypes() -> list:
    """Every dtype torch has, in one fixed order, so a dtype can travel as its index (same torch on every rank)."""
    return sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str)


def _exchange(t: torch.Tensor, root: int, fn: str, name: str) -> list[_Meta]:
    """Every rank's shape, dtype and root, known to every rank: two small all_gathers on t's device."""
    dtypes, world = _all_dtypes(), get_world_size()
    head = torch.tensor([dtypes.index(t.dtype), t.dim(), root], device=t.device)
    heads = [torch.empty_like(head) for _ in range(world)]
    dist.all_gather(heads, head)
    heads = [h.tolist() for h in heads]
    ndim = max(h[1] for h in heads)
    shapes = [()] * world
    if ndim:  # same on every rank: all skip, or all take part
        dims = torch.tensor(list(t.shape) + [0] * (ndim - t.dim()), device=t.device)
        all_dims = [torch.empty_like(dims) for _ in range(world)]
        dist.all_gather(all_dims, dims)
        shapes = [tuple(d[:h[1]].tolist()) for d, h in zip(all_dims, heads)]
    metas = [_Meta(s, dtypes[h[0]], h[2]) for s, h in zip(shapes, heads)]
    roots = {m.root for m in metas}
    if len(roots) > 1:
        said = "; ".join(f"{_say_ranks([r for r, m in enumerate(metas) if m.root == v])} {name}={v}"
                         for v in sorted(roots))
        raise ValueError(f"{fn}: the ranks disagree on {name} ({said}); every rank must pass the same {name}.")
    return metas


def _what(m: _Meta) -> str:
    return f"shape {list(m.shape)} {_dtype(m.dtype)}"


def _each(metas: list[_Meta], what: str, among=None) -> str:
    """'ranks 0-2 have float32, rank 3 has int64' (what='dtype') or 'ranks 1-3 receive into shape [1] float32'."""
    among = range(len(metas)) if among is None else among
    groups: dict[str, list[int]] = {}
    for r in among:
        groups.setdefault(_dtype(metas[r].dtype) if what == "dtype" else _what(metas[r]), []).append(r)
    if what == "dtype":
        return ", ".join(f"{_say_ranks(rs)} {'has' if len(rs) == 1 else 'have'} {k}" for k, rs in groups.items())
    return ", ".join(f"{_say_ranks(rs)} receive{'s' if len(rs) == 1 else ''} into {k}" for k, rs in groups.items())


def _object_device():
    """Under NCCL torch moves a pickled object through torch.cuda.current_device(): make that this rank's GPU."""
    dev = get_device()
    return torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext()
