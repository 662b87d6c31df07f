"""One run's lifecycle over two ways of starting its processes (the shape of torchelastic's `PContext`: start, poll,
signal, close). `lifecycle` holds the state the steps share and runs them in order, each step in its own file:
`watch` (the processes and traces read, the policy asked whether to stop, faults fired, stacks and recorder dumps
asked for, `asks` bounding every wait), `stop` (stacks, dumps, ending the processes), `assemble` (the frozen
result). `procs` is the backend interface: `zygote` (the sandbox's own launcher, `Run` below) and torchrun's agents
on simulated nodes (`sandbox.agents`). `options` holds what a run accepts and the errors a caller sees; `start` the
ranks' environment. `sandbox.launcher` is the door. Run with `-v` (or
`logging.getLogger("sandbox").setLevel(logging.INFO)`) to see each step.
"""
from __future__ import annotations

import sys
import uuid
from typing import Callable

from sandbox import defaults
from sandbox import warm as zygotes
from sandbox._run import options
from sandbox._run.lifecycle import Lifecycle
from sandbox._run.options import Interrupted, UsageError
from sandbox._run.start import debug_settings
from sandbox._run.zygote import ZygoteProcs
from sandbox.topology import Topology


class Run(Lifecycle):
    """One run of the sandbox's own launcher (a zygote forks the ranks). Options:

    init: call init_process_group (with `backend` and `pg_timeout`) before fn, destroy it after (func targets).
    backend: "gloo" (default) or "nccl"; gpu: one GPU per rank (NCCL by default).
    hang_after: seconds every live rank must sit in calls nobody can complete before it is a hang (a deadlock the
        traces prove, such as a collective mismatch or a send/send cycle, is named sooner).
    timeout: the whole run's limit, seconds; then ranks are stopped and the verdict is "timeout".
    env: extra environment for the ranks; debug: TORCH_DISTRIBUTED_DEBUG level ("DETAIL", "INFO"; "OFF" unsets it).
    trace_dir: keep traces, logs and stacks there (default: a temp dir, removed after the run).
    on_output: callback(rank, line) for every line a rank prints, as it prints it.
    preload: modules the zygote imports before it forks, so every rank shares one import of them.
    warm: fork the run from this process's warm zygote (torch imported once per process: later runs cost a fork);
        None (default) means warm inside a Jupyter kernel, cold elsewhere (SANDBOX_WARM=1/0 overrides).
    nnodes: spread the world_size ranks over this many simulated nodes (`sandbox.nodes`: a network namespace, a
        hostname and an address each; needs root), world_size / nnodes on each, in rank order.
    node_options: with nnodes > 1, keyword arguments for `sandbox.nodes.Cluster` (`hostname_loopback=True`: each
        node resolves its own name to 127.0.1.1; `cap="1gbit"`: every link capped to that rate).
    faults: with nnodes > 1, `sandbox.faults.Fault`s injected during the run (a node killed, a link down), stated
        in the report and drawn on the timeline; a killed node that ends the run is its diagnosis (node_failure).
    The defaults of hang_after, timeout and pg_timeout are `sandbox.defaults`'.
    """

    def __init__(self, target: dict, world_size: int, *, init: bool = False, backend: str | None = None,
                 gpu: bool = False, hang_after: float = defaults.HANG_AFTER_S, timeout: float = defaults.RUN_TIMEOUT_S,
                 pg_timeout: float = defaults.PG_TIMEOUT_S, env: dict | None = None, debug: str | None = None,
                 trace_dir: str | None = None, on_output: Callable[[int, str], None] | None = None,
                 preload: list[str] | tuple = (), warm: bool | None = None, nnodes: int = 1,
                 node_options: dict | None = None, faults: list | tuple = ()):
        options.check(world_size, hang_after, timeout, pg_timeout, env)
        options.check_nodes(world_size, nnodes, node_options, gpu)
        options.check_faults(list(faults), world_size, nnodes)
        topology = Topology(nnodes=nnodes, per_node=world_size // nnodes)
        super().__init__(topology=topology, hang_after=hang_after, timeout=timeout, trace_dir=trace_dir,
                         node_options=node_options, faults=faults)
        self.target = target
        spec = {"target": target, "world_size": world_size, "run_dir": self.dir, "gpu": gpu, "init": init,
                "backend": backend, "pg_timeout_s": float(pg_timeout), "env": dict(env or {}),
                "run_id": "sandbox-" + uuid.uuid4().hex[:8], "sys_path": list(sys.path),
                "preload": list(preload), "nodes": [], "topology": topology}
        env_extra, env_unset = debug_settings(debug)
        self.procs = ZygoteProcs(self, spec, warm=zygotes.default() if warm is None else bool(warm),
                                 env_extra=env_extra, env_unset=env_unset, on_output=on_output)


__all__ = ["Interrupted", "Run", "UsageError"]
