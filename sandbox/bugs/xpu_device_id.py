"""xpu-device-id: `device_id` passed to init_process_group on XPU, then a gloo group for CPU work.

Source: a real report from an XPU/XCCL port of a CUDA/NCCL code base.

Symptom: `RuntimeError: No backend type associated with device type xpu` from `new_group(backend="gloo")`.

Root cause: `init_process_group(backend="xccl", device_id=xpu:i)` binds the default group to that device.
`new_group` inherits the bound device (torch/distributed/distributed_c10d.py, `new_group` ->
`_new_group_with_tag`), and `_new_process_group_helper` then asks `pg._get_backend(device_id)` whether it can
split the parent group (about l.2333 in torch 2.13).
Gloo registered only for "cpu" and "cuda", so there is no backend for "xpu". CUDA code never sees this, because
gloo lists cuda.

Fix: pass `device_id` only where it belongs (CUDA/ROCm with NCCL), not for XPU/XCCL or gloo.

Simulated: this machine has no XPU. The "xccl" backend is a registered stand-in (gloo underneath, devices=["xpu"])
and torch.accelerator answers "xpu" inside the ranks; the error is raised by PyTorch's own new_group code.

On GPUs (NCCL): the CUDA code this port started from, with `device_id=cuda:i`, works: `new_group(backend=
"gloo")` inherits the bound cuda device, and gloo is registered for "cpu" and "cuda"
(`dist.Backend.backend_capability["gloo"]`, printed by every rank). Both variants pass; that is the root cause
seen from the other side: only a device type gloo does not list, such as xpu, breaks.

Run: python -m sandbox.repro xpu-device-id
    broken: ERROR [rank_error]: 4 ranks in 1.68 s
      All 4 ranks raised the same error, RuntimeError: No backend type associated with device type xpu at
      sandbox/bugs/xpu_device_id.py:63.
      expected: error, rank_error, error /No backend type associated with device type xpu/ -> as documented
    fixed: OK: 4 ranks in 1.22 s
      expected: ok, = single-process reference -> as documented
"""
import datetime
import os

import torch
import torch.distributed as dist

from sandbox import simulate
from sandbox.bugs import Bug, Expect, Gpu

BUG = Bug(
    slug="xpu-device-id", title="device_id on XPU breaks new_group(backend='gloo')",
    source="XPU/XCCL port of a CUDA code base (a real report; torch/distributed/distributed_c10d.py, new_group)",
    symptom="RuntimeError: No backend type associated with device type xpu",
    world_size=4, min_world_size=1, needs="simulated",
    broken=Expect("error", "rank_error", error=r"No backend type associated with device type xpu"),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect("ok", output=r"nccl bound to cuda:0; gloo serves \['cpu', 'cuda'\]"),
            fixed=Expect("ok", matches_reference=True)))


def _setup(pass_device_id):
    rank = int(os.environ["RANK"])
    if torch.cuda.is_available():  # --gpu: the CUDA code this port started from, with NCCL on real GPUs
        kind, backend = "cuda", "nccl"
    else:
        simulate.xpu()  # SIMULATED: an XCCL backend and XPU devices on a CPU build
        kind, backend = "xpu", simulate.XPU_BACKEND
    kwargs = {"device_id": torch.device(kind, rank)} if pass_device_id else {}
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60), **kwargs)
    print(f"rank {rank}: {backend} bound to {kwargs.get('device_id', 'no device')}; gloo serves "
          f"{dist.Backend.backend_capability['gloo']}", flush=True)
    cpu_group = dist.new_group(list(range(dist.get_world_size())), backend="gloo")  # for CPU-side metadata
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=cpu_group)
    dist.destroy_process_group()
    return t.item()


def broken():  # BUG: device_id=xpu:i, as the CUDA code did with cuda:i (here, not on the line a traceback shows)
    return _setup(pass_device_id=True)


def fixed():
    return _setup(pass_device_id=False)  # FIX: device_id only for CUDA/ROCm + NCCL


def reference(world_size):
    return float(sum(range(world_size)))
