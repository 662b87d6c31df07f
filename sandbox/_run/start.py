"""The ranks' environment, decided here for both launchers: the zygote's ranks (`sandbox._run.zygote`) and
torchrun's agents and their workers (`sandbox.agents`)."""
from __future__ import annotations

import os

from sandbox import defaults


def debug_settings(level: str | None) -> tuple[dict, tuple]:
    """The ranks' environment for a --debug level: what to set, and what to unset (with OFF: PyTorch's default,
    whatever this process's environment says)."""
    extra = defaults.debug_env(level)
    return extra, ("TORCH_DISTRIBUTED_DEBUG",) if level is not None and not extra else ()


def ranks_env(env_extra: dict, gpu: bool, run_dir: str, owns_dir: bool, unset: tuple = (),
              nodes: bool = False) -> dict:
    """The zygote's (and so the ranks') environment: ours, with torchrun's choices for several workers per node.
    On several simulated nodes gloo and NCCL pick their interface as on a cluster (the hostname's address)."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun does for several workers per node
    if not nodes:
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo pairs listen on loopback only
        env.setdefault("NCCL_SOCKET_IFNAME", "lo")
    env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # count GPUs without initialising CUDA before fork
    for name in unset:
        env.pop(name, None)
    env.update(env_extra)
    if not gpu:  # a CPU run on any machine: the zygote and the ranks see no GPU, so nothing in
        env["CUDA_VISIBLE_DEVICES"] = ""  # them (FakeTensors on "cuda:1" included) can initialise real CUDA
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(SANDBOX_PARENT_PID=str(os.getpid()), SANDBOX_RUN_DIR=run_dir, SANDBOX_OWNS_DIR="1" if owns_dir else "0")
    return env

