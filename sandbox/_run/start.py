"""A run's first step: write its spec and get its zygote, a cold one (a new process that imports torch) or a fork of
this process's warm one (`sandbox.warm`). The ranks' environment is decided here."""
from __future__ import annotations

import logging
import os
import pickle

from sandbox import rundir
from sandbox import warm as zygotes
from sandbox.channel import Channel

log = logging.getLogger("sandbox.launcher")


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


class Starting:
    """The start step of `sandbox._run.Run`."""

    def _start(self) -> None:
        env = ranks_env(self.env_extra, self.spec["gpu"], self.dir, self.owns_dir, self.env_unset,
                        nodes=bool(self.spec["nodes"]))
        spec_path = os.path.join(self.dir, rundir.SPEC)
        with open(spec_path, "wb") as f:  # a file, not a pipe: writing it can never block on the zygote
            pickle.dump(self.spec, f)
        log_path = os.path.join(self.dir, rundir.ZYGOTE_LOG)
        if self.warm:
            self.proc = zygotes.fork_run(env, spec_path, log_path, interrupted=lambda: bool(self.held))
            log.info("run forked by the warm zygote (pid %d) for %d ranks, run directory %s", self.proc.pid, self.n,
                     self.dir)
        else:
            env["SANDBOX_SPEC"] = spec_path
            self.proc = zygotes.cold(env, log_path)
            log.info("zygote started (pid %d) for %d ranks, run directory %s", self.proc.pid, self.n, self.dir)
        self.channel = Channel(self.proc.fd)
