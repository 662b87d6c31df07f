"""One run's lifecycle, in named steps, each in its own file: `start` (the spec, the zygote, the ranks'
environment), `watch` (the zygote's pipe, the ranks' traces, the policy asked whether to stop), `stop` (stacks,
signals, ending the ranks, reaping), `assemble` (the frozen result). `options` holds what a run accepts and the
errors a caller sees. `Run` holds the state the steps share and runs them in order; `sandbox.launcher` is the door.
Run with `-v` (or `logging.getLogger("sandbox").setLevel(logging.INFO)`) to see each step.
"""
from __future__ import annotations

import dataclasses
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Callable

from sandbox import defaults, faults as faultlib, policy, rundir
from sandbox import warm as zygotes
from sandbox._run import options
from sandbox._run.assemble import Assembling
from sandbox._run.options import Interrupted, UsageError
from sandbox._run.start import Starting
from sandbox._run.stop import ZYGOTE_EXIT_S, Stopping
from sandbox._run.watch import INTERRUPTED, Watching
from sandbox.channel import Channel
from sandbox.events import RankTrack, Tail
from sandbox.result import Diagnosis, RankResult, RunResult
from sandbox.topology import Topology


class Run(Starting, Watching, Stopping, Assembling):
    """One run. Options:

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
        self.target, self.n = target, world_size
        self.settings = policy.Settings(hang_after=float(hang_after), timeout=float(timeout))
        self.on_output = on_output
        self.owns_dir = trace_dir is None
        self.dir = tempfile.mkdtemp(prefix="sandbox-run-") if trace_dir is None else options.trace_dir(trace_dir)
        self.spec = {"target": target, "world_size": world_size, "run_dir": self.dir, "gpu": gpu, "init": init,
                     "backend": backend, "pg_timeout_s": float(pg_timeout), "env": dict(env or {}),
                     "run_id": "sandbox-" + uuid.uuid4().hex[:8], "sys_path": list(sys.path),
                     "preload": list(preload), "nodes": [],
                     "topology": Topology(nnodes=nnodes, per_node=world_size // nnodes)}
        self.nnodes, self.node_options = nnodes, dict(node_options or {})
        self.cluster = None  # the simulated nodes (several only), made when the run starts
        self.faults, self.schedule = list(faults), None
        self.env_extra = defaults.debug_env(debug)
        # --debug OFF: PyTorch's default, whatever this process's environment says
        self.env_unset = ("TORCH_DISTRIBUTED_DEBUG",) if debug is not None and not self.env_extra else ()
        self.tracks = {r: RankTrack(r) for r in range(world_size)}
        self.tails = {r: Tail(rundir.trace(self.dir, r)) for r in range(world_size)}
        self.raw: dict[int, list[bytes]] = {r: [] for r in range(world_size)}
        self.last: dict[int, bytes] = {r: b"" for r in range(world_size)}
        self.log_tails = {r: Tail(rundir.log(self.dir, r)) for r in range(world_size)} \
            if on_output else {}
        self.proc: zygotes.Handle | None = None
        self.warm = zygotes.default() if warm is None else bool(warm)
        self.channel: Channel | None = None
        self.fatal: dict | None = None
        self.zygote_done = False
        self.stopped_for: str | None = None
        self.detect_s: float | None = None
        self.ended_at: float | None = None
        self.stack_from: dict[int, int] = {}  # where each rank's last stack dump starts (earlier ones were stale)
        self.held: list[int] = []    # SIGINT/SIGTERM that arrived during the run: the watchdog stops it

    def run(self) -> RunResult:
        t0 = time.monotonic()
        with self._signals():
            try:
                self._open_nodes()
                self._start_and_watch()
                if self.fatal is not None and self.fatal.get("usage"):
                    self._reap()
                    raise UsageError(self.fatal["fatal"])
                res = self._finish(t0)
            finally:
                self._cleanup()
        if self.held:
            raise Interrupted(res, self.held[0]) from None
        return res

    def _start_and_watch(self) -> None:
        try:
            self._start()
            self._watch()
        except KeyboardInterrupt:  # from a handler other than ours (launch() outside the main thread), or a
            # warm zygote that was interrupted while it started
            if not self.held:
                self.held.append(signal.SIGINT)
            if self.proc is not None and self.stopped_for is None:
                self._stop(INTERRUPTED)
        if self.held and self.stopped_for != INTERRUPTED:
            self.stopped_for = INTERRUPTED  # the signal came while the run was being stopped or assembled

    def _finish(self, t0: float) -> RunResult:
        """Reap and assemble; assemble again if a signal came during the teardown (the verdict is then that)."""
        if self.proc is None:  # interrupted before the zygote could even start
            return RunResult(verdict=INTERRUPTED, world_size=self.n, wall_s=time.monotonic() - t0,
                             diagnosis=Diagnosis(kind="none", cause="Interrupted before the ranks started."),
                             ranks=[RankResult(rank=r, outcome="stopped") for r in range(self.n)])
        self._reap()
        res = self._assemble(time.monotonic() - t0)
        if self.held and self.stopped_for != INTERRUPTED:  # the signal came during the teardown
            self.stopped_for = INTERRUPTED
            res = self._assemble(res.wall_s)
        return res

    def _open_nodes(self) -> None:
        """Several nodes: make them (inside the run's signal handling and cleanup, so no ending leaves them)."""
        if self.nnodes > 1:
            from sandbox import nodes

            self.cluster = nodes.Cluster(nnodes=self.nnodes, **self.node_options)
            self.cluster.__enter__()
            self.spec["nodes"] = [dataclasses.asdict(n) for n in self.cluster.nodes]
            self.schedule = faultlib.Schedule(self.faults, self.cluster, after_kill=": its ranks with it")

    def _cleanup(self) -> None:
        self._kill()
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    self.proc.wait(timeout=ZYGOTE_EXIT_S)
                except subprocess.TimeoutExpired:  # see _reap: nothing more can be done to a SIGKILLed process
                    pass
            self.proc.close()
        if self.cluster is not None:  # after the ranks: it ends what is still inside a node, then removes the nodes
            self.cluster.close()
        for tail in list(self.tails.values()) + list(self.log_tails.values()):
            tail.close()
        if self.owns_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


__all__ = ["Interrupted", "Run", "UsageError"]
