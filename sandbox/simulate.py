"""Faithful stand-ins for hardware this machine lacks, at the lowest layer that keeps PyTorch's own code path.
Everything here is labelled "simulated" wherever its output is shown.

- `xpu()`: an Intel-GPU process group. An "xccl_sim" backend registered for the xpu device type (it is gloo
  underneath), and torch.accelerator answering "xpu", so `init_process_group(device_id=xpu:i)` is accepted and
  PyTorch's own `new_group(backend="gloo")` raises its real error at its real line
  (`No backend type associated with device type xpu`). Call it only inside a rank.
- `on_device(t, "cuda:1")` / `DeviceSample`: tensors that live on simulated CUDA devices. They are FakeTensors
  (shape, dtype, device, no storage) carrying their CPU data beside them; they pickle as (data, device) and come
  back on their original device, as real CUDA tensors do through `all_gather_object`; mixing devices under
  `devices_checked()` raises PyTorch's own device-mismatch error.

Nothing here touches real CUDA: it runs the same on a CPU build and on a CUDA build with or without GPUs.
"""
from __future__ import annotations

import contextlib
import re

import torch
import torch.distributed as dist

XPU_BACKEND = "xccl_sim"
_fake_mode = None


def xpu(count: int = 8) -> None:
    """Make this process look like it has `count` XPUs and an XCCL backend (gloo underneath)."""
    def xccl_standin(store, rank, size, timeout):
        return dist.ProcessGroupGloo(store, rank, size, timeout)

    if XPU_BACKEND not in dist.Backend.backend_list:
        dist.Backend.register_backend(XPU_BACKEND, xccl_standin, devices=["xpu"])
    torch.accelerator.current_accelerator = lambda *a, **k: torch.device("xpu")
    torch.accelerator.device_count = lambda: count


def fake_mode():
    global _fake_mode
    if _fake_mode is None:
        from torch._subclasses.fake_tensor import FakeTensorMode
        _fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    return _fake_mode


# FakeTensorMode's device check (torch/_subclasses/fake_tensor.py, FakeTensor._find_common_device) says
# "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cuda:1!" from torch
# 2.13 on (FakeTensorDeviceMismatchError), and "Unhandled FakeTensor Device Propagation for aten.stack.default, found
# two different devices cuda:0, cuda:1" before (2.11). Same check, same devices: the older wording is reworded.
_OLD_WORDING = re.compile(r"Unhandled FakeTensor Device Propagation for \S+, found two different devices (\S+), (\S+)$")


@contextlib.contextmanager
def devices_checked():
    """Ops on simulated devices, checked by PyTorch's own FakeTensor code, worded alike on every supported torch.

    The older wording is changed in the error itself, which is then raised again as it is: a new exception raised
    here would start its traceback at the `with` line that left this block (the with statement, not the op), so
    the error's site would differ from one torch to the next (cross-device's stack at line 108 on 2.13, its `with`
    at line 104 on 2.11). The same exception, re-raised, keeps the traceback that ends at the user's op."""
    with fake_mode():
        try:
            yield
        except RuntimeError as e:
            m = _OLD_WORDING.match(str(e))
            if not m or type(e) is not RuntimeError:
                raise
            e.args = ("Expected all tensors to be on the same device, but found at least two devices, "
                      f"{m[1]} and {m[2]}!",)
            raise


def warm() -> None:
    """Pay the first FakeTensor's set-up cost (about a second) once, e.g. in the zygote before the fork."""
    on_device(torch.zeros(1), "cuda:0")


def on_device(data: torch.Tensor, device: str) -> torch.Tensor:
    """A simulated tensor on `device` ("cuda:1"), holding `data` (CPU) as its values."""
    with fake_mode():
        t = torch.empty(data.shape, dtype=data.dtype, device=device)
    t.sim_data = data  # the values, kept beside the storage-less fake tensor
    return t


class DeviceSample(dict):
    """A dict of tensors on a simulated device that pickles like real CUDA tensors would: each tensor comes back
    on the device it left from."""

    def __reduce__(self):
        return (_rebuild_sample, ({k: (v.sim_data, str(v.device)) if isinstance(v, torch.Tensor) else v
                                   for k, v in self.items()},))


def _rebuild_sample(items):
    return DeviceSample({k: on_device(*v) if isinstance(v, tuple) else v for k, v in items.items()})


def stack(tensors, *args, **kwargs):
    """torch.stack under the fake mode, so simulated devices are checked by PyTorch's own code."""
    with devices_checked():
        return torch.stack(tensors, *args, **kwargs)
