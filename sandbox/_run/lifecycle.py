"""One run's lifecycle, whoever starts its processes: open the nodes, start, watch (the policy asked, faults fired,
stacks and recorder dumps asked for), stop, reap, assemble the result, tear everything down. The steps are in their
own files (`watch`, `stop`, `assemble`); how the processes start and end is a backend's (`sandbox._run.procs`: the
zygote, or torchrun's agents), so a rule, a fault or a report added here works under both launchers.

SIGINT and SIGTERM are noted while a run is up, not raised (`stop.noted_signals`): the watch stops the run within a
poll, every step of the teardown is bounded, and `Interrupted` is raised once nothing of the run is left.
"""
from __future__ import annotations

import logging
import signal
import sys
import tempfile
import time

from sandbox import faults as faultlib, policy
from sandbox._proc import remove_dir
from sandbox._run import asks, options
from sandbox._run.assemble import Assembling
from sandbox._run.options import Interrupted
from sandbox._run.procs import Procs
from sandbox._run.stop import INTERRUPTED, Stopping, noted_signals
from sandbox._run.watch import Watching
from sandbox.result import Diagnosis, Kind, RankResult, RunResult
from sandbox.topology import Topology

log = logging.getLogger("sandbox.launcher")


def refused_at_import() -> None:
    """A run started by the top-level code of a script while the ranks import that script to find their function
    (as multiprocessing's spawn imports it; `sandbox.rank.IMPORTING_MAIN`) would start runs within runs: refused,
    whichever door it came through. The zygote hands the sentence to the launcher that asked, which raises it."""
    rank = sys.modules.get("sandbox.rank")
    importing = getattr(rank, "IMPORTING_MAIN", None)
    if importing:
        raise rank.TopLevelLaunch(f"a run was started at the top level of {importing[-1]}, which the ranks import to "
                                  f"find the function they run: put that call under `if __name__ == \"__main__\":`.")


class Lifecycle(Watching, Stopping, Assembling):
    """The state a run's steps share. A door (`sandbox._run.Run`, `sandbox.agents.AgentsRun`) checks its options,
    then sets `self.procs`, its backend; `run()` does the rest.

    topology: the run's nodes and which rank is on which (`sandbox.topology`); several nodes are simulated
    (`sandbox.nodes`, with `node_options`) and `faults` are injected into them. hang_after, timeout: the policy's
    (`sandbox.policy.Settings`). trace_dir: keep the run's files there (default: a temp dir, removed after)."""

    procs: Procs

    def __init__(self, *, topology: Topology, hang_after: float, timeout: float, trace_dir: str | None,
                 node_options: dict | None = None, faults=()):
        refused_at_import()  # before anything of the run exists
        self.topology, self.n = topology, topology.world_size
        self.settings = policy.Settings(hang_after=float(hang_after), timeout=float(timeout))
        self.owns_dir = trace_dir is None
        self.dir = tempfile.mkdtemp(prefix="sandbox-run-") if trace_dir is None else options.trace_dir(trace_dir)
        self.node_options, self.faults = dict(node_options or {}), list(faults)
        self.cluster = None  # the simulated nodes (several only), made when the run starts
        self.schedule: faultlib.Schedule | None = None
        self.held: list[int] = []    # SIGINT/SIGTERM that arrived during the run: the watch stops it
        self.stopped_for: str | None = None
        self.detect_s: float | None = None
        self.ended_at: float | None = None
        self.stack_from: dict[int, asks.Mark] = {}  # where each rank's last stack dump starts (earlier ones: stale)
        self.dumps = asks.Dumps(self.dir)
        # rank -> (when its dump now on disk was asked for, its trace lines read by then): see Watching._fresh_dumps
        self.dump_asked: dict[int, tuple[float, int]] = {}

    def run(self) -> RunResult:
        t0 = time.monotonic()
        with noted_signals(self.held):
            try:
                self._open_nodes()
                self._start_and_watch()
                self.procs.reap()
                res = self._finish(t0)
            finally:
                self._cleanup()
        if self.held:
            raise Interrupted(res, self.held[0]) from None
        return res

    def _open_nodes(self) -> None:
        """Several nodes: make them (inside the run's signal handling and cleanup, so no ending leaves them)."""
        if self.topology.nnodes > 1:
            from sandbox import nodes

            self.cluster = nodes.Cluster(nnodes=self.topology.nnodes, **self.node_options)
            self.cluster.__enter__()
            self.schedule = faultlib.Schedule(self.faults, self.cluster, after_kill=self.procs.AFTER_KILL,
                                              on_kill=self.procs.on_kill)

    def _start_and_watch(self) -> None:
        try:
            self.procs.start()
            self._watch()
        except KeyboardInterrupt:  # from a handler other than ours (a run outside the main thread), or a warm
            # zygote that was interrupted while it started
            if not self.held:
                self.held.append(signal.SIGINT)
            if self.procs.started and self.stopped_for is None:
                self._stop(INTERRUPTED)
        if self.held and self.stopped_for != INTERRUPTED:
            self.stopped_for = INTERRUPTED  # the signal came while the run was being stopped or assembled

    def _finish(self, t0: float) -> RunResult:
        """Assemble; assemble again if a signal came during the teardown (the verdict is then that)."""
        if not self.procs.started:  # interrupted before anything could start
            return RunResult(verdict=INTERRUPTED, world_size=self.n, wall_s=time.monotonic() - t0,
                             diagnosis=Diagnosis(kind=Kind.NONE, cause="Interrupted before the ranks started."),
                             ranks=[RankResult(rank=r, outcome="stopped") for r in range(self.n)])
        res = self._assemble(time.monotonic() - t0)
        if self.held and self.stopped_for != INTERRUPTED:  # the signal came during the teardown
            self.stopped_for = INTERRUPTED
            res = self._assemble(res.wall_s)
        return res

    def _cleanup(self) -> None:
        self.procs.close()
        if self.cluster is not None:  # after the processes: it ends what is still inside a node, then the nodes
            self.cluster.close()
        if self.owns_dir:
            remove_dir(self.dir)  # again if a rank being killed still made a file in it
