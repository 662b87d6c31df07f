"""`--launcher torchrun`: PyTorch's own elastic agent on every simulated node, the sandbox's tracer in its workers.

    python -m sandbox.run --launcher torchrun --nnodes 2 --nproc-per-node 2 train.py
    python -m sandbox.run --launcher torchrun --nnodes 2 --nproc-per-node 2 --max-restarts 1 --kill-node 1@3s train.py

Each node runs `python -m torch.distributed.run --nnodes K --nproc-per-node P --rdzv-backend c10d --rdzv-endpoint
node0:29400 ... -m sandbox.trace --trace-dir DIR script.py`, so rendezvous, rank assignment, `--max-restarts` and
membership changes are torchrun's own. The sandbox does what a person at the cluster would: it watches the traces
the workers write (the hang rule is the same as for its own launcher), injects faults from outside the nodes, and
tears everything down. A node killed here comes back at once with a fresh agent, as a cluster scheduler restarts a
machine's job: whether the job goes on is torchrun's decision. Workers that failed use up one of `--max-restarts`;
a healthy group is also restarted, without counting, when a node waits to join (torchrun's membership change,
elastic/agent/server/api.py), which the new agent would trigger if the other nodes' workers had not failed first.

The verdict is judged from the last attempt's traces as `python -m sandbox.diagnose DIR` judges them, with the one
fact only the launcher has: the workers it killed with their node crashed (from their files alone, one killed inside
a collective looks hung). A worker restarted by torchrun moves its earlier attempt's trace to DIR/attempts/
(`sandbox.trace`), and the report says what was injected, which node died, and how often torchrun restarted the
workers after a failure.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from sandbox import defaults, events, faults as faultlib, flight, flight_view, netns, nodes, policy, rundir
from sandbox._run import options
from sandbox._run.assemble import on_nodes
from sandbox._run.options import Interrupted, UsageError
from sandbox._run.start import ranks_env
from sandbox._run.stop import noted_signals
from sandbox.result import RankResult, RunResult
from sandbox.topology import Topology, hostname

log = logging.getLogger("sandbox.launcher")

RDZV_PORT = 29400     # torchrun's own default; free in node0's namespace, which nothing else uses
POLL_S = 0.1          # how often the sandbox looks at the agents and the traces
STACK_WAIT_S = 1.0    # how long hung workers get to write their Python stacks
AGENT_EXIT_S = 5.0    # how long a killed node's agent may take to be reaped
FLIGHT_WAIT_S = 0.5   # how long the workers' Flight Recorder dumps may take
AGENTS_GRACE_S = 5.0   # once one agent has ended by itself, how long the others get to end too
RESTARTED = re.compile(r"restart_count=(\d+)")  # torchrun's "Rendezvous complete for workers. Result: ..." line


class AgentsRun:
    """One run of a script under real torchrun agents, one per simulated node (see the module's docstring)."""

    def __init__(self, target: dict, *, nnodes: int, nproc_per_node: int, max_restarts: int = 0,
                 hang_after: float = defaults.HANG_AFTER_S, timeout: float = defaults.RUN_TIMEOUT_S,
                 trace_dir: str | None = None, node_options: dict | None = None, faults: list[faultlib.Fault] = (),
                 env: dict | None = None, debug: str | None = None):
        world = nnodes * nproc_per_node
        options.check(world, hang_after, timeout, defaults.PG_TIMEOUT_S, env)
        options.check_nodes(world, nnodes, node_options)
        if nnodes < 2:
            raise UsageError("--launcher torchrun runs on simulated nodes: give --nnodes 2 or more.")
        wrong = faultlib.check(list(faults), nnodes, world)
        if wrong:
            raise UsageError(wrong)
        self.target, self.n, self.nnodes, self.per = target, world, nnodes, nproc_per_node
        self.topology = Topology(nnodes=nnodes, per_node=nproc_per_node, by_hostname=True)
        self.max_restarts = max_restarts
        self.settings = policy.Settings(hang_after=float(hang_after), timeout=float(timeout))
        self.node_options, self.faults = dict(node_options or {}), list(faults)
        self.schedule: faultlib.Schedule | None = None
        self.owns_dir = trace_dir is None
        self.dir = tempfile.mkdtemp(prefix="sandbox-run-") if trace_dir is None else options.trace_dir(trace_dir)
        self.env = dict(env or {}, **defaults.debug_env(debug))
        self.cluster: nodes.Cluster | None = None
        self.agents: dict[int, subprocess.Popen] = {}
        self.held: list[int] = []
        self.traces = events.DirTail(self.dir)  # what the watch reads as the workers write it
        self.dumps: tuple[list, dict] = ([], {})  # the Flight Recorder dumps last read, and their files' stamps
        self.stopped_for: str | None = None
        self.detect_s: float | None = None

    # ------------------------------------------------------------------------------------------- the agents
    def _agent_argv(self, node: nodes.Node) -> list[str]:
        t = self.target
        worker = ["-m", "sandbox.trace", "--trace-dir", self.dir, "--rank-log"] + (
            ["-m", t["name"]] if t["kind"] == "module" else [t["path"]]) + list(t["argv"])
        # PDEATHSIG (kept across the execs of `ip netns exec`, `unshare` and `sh`): the agent gets SIGKILL when
        # this process dies, even by SIGKILL; its workers, in sessions of their own, watch it themselves. Set by a
        # program, not a preexec_fn: a caller with threads (a Jupyter kernel) could deadlock in one
        return ["setpriv", "--pdeathsig", "KILL"] + node.wrap([
            sys.executable, "-m", "torch.distributed.run", "--nnodes", str(self.nnodes),
            "--nproc-per-node", str(self.per), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{self.cluster.node(0).hostname}:{RDZV_PORT}",
            "--rdzv-id", os.path.basename(self.dir), "--max-restarts", str(self.max_restarts),
            "--monitor-interval", "0.5",
            # its own files in the run's directory: by default each agent leaves a torchelastic_* in /tmp
            "--log-dir", rundir.agent_dir(self.dir, node.hostname), *worker])

    def _start_agent(self, i: int) -> None:
        env = ranks_env(self.env, False, self.dir, self.owns_dir, nodes=True)
        env[defaults.WATCH_PID_ENV] = str(os.getpid())  # its workers end themselves if this process dies
        env["LOGLEVEL"] = "INFO"  # torchrun's own account of rendezvous and restarts, in its node's log
        # A node that comes back after a kill joins with a fresh agent. With the rendezvous store shared (torchrun's
        # default) the rank-0 agent reuses the master address it published in the first round and never writes it
        # again, while the new agent waits for it in the new round's keys: both sit 60 s and fail (checked with
        # torch 2.13, dynamic_rendezvous.py next_rendezvous; restarts and the shared store: pytorch/pytorch#135712).
        # torchrun's opt-out publishes it in every round.
        env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
        # a node that comes back appends to its log; the first agent starts it afresh (a kept --trace-dir)
        out = open(rundir.agent_log(self.dir, i), "ab" if i in self.agents else "wb")
        try:  # its own session: the sandbox ends an agent with all it started, and a terminal's Ctrl-C is ours
            self.agents[i] = subprocess.Popen(self._agent_argv(self.cluster.node(i)), stdin=subprocess.DEVNULL,
                                              stdout=out, stderr=subprocess.STDOUT, env=env, cwd=os.getcwd(),
                                              start_new_session=True)
        finally:
            out.close()
        log.info("torchrun agent on node%d: pid %d", i, self.agents[i].pid)

    # ------------------------------------------------------------------------------------------- the run
    def run(self) -> RunResult:
        t0 = time.monotonic()
        with noted_signals(self.held):
            try:
                self.cluster = nodes.Cluster(nnodes=self.nnodes, **self.node_options).__enter__()
                self.schedule = faultlib.Schedule(self.faults, self.cluster, on_kill=self._reboot,
                                                  after_kill=": its torchrun agent and its workers; it came back "
                                                             "with a fresh agent")
                for i in range(self.nnodes):
                    self._start_agent(i)
                self._watch(t0)
                res = self._assemble(time.monotonic() - t0)
            finally:
                self._teardown()
        if self.held:
            raise Interrupted(res, self.held[0]) from None
        return res

    def _tracks(self, watching: bool = False) -> dict:
        """The workers' tracks from their traces, merged with their Flight Recorder dumps. `watching`: read as the
        run goes (only what was appended since the last look, dumps only when one changed), and as the hang rule
        must see them (`watched`); else read whole, with the stacks, for the report."""
        if not os.path.exists(os.path.join(self.dir, rundir.META)):
            return {}
        if not watching:
            tracks = policy.fill_missing(events.load_dir(self.dir))
            dumps = flight.read_run(self.dir)
            return flight_view.merge(tracks, dumps) if dumps else tracks
        tracks = policy.fill_missing(self.traces.tracks())
        stamp = _stamps(self.dir, rundir.FLIGHT)
        if stamp != self.dumps[0]:
            self.dumps = (stamp, flight.read_run(self.dir))
        return watched(flight_view.merge(tracks, self.dumps[1]) if self.dumps[1] else tracks, netns.alive)

    def _ask_flight(self, tracks: dict) -> None:
        """SIGUSR2 to every live worker whose recorder is armed: it dumps what its process groups did, the calls
        made in C++ (DDP's gradient all_reduce) included; then a bounded wait for the dumps."""
        asked = {}
        for t in tracks.values():
            pid = (t.hello or {}).get("pid")
            if t.exit_code is None and pid and t.hello.get("flight"):
                path = rundir.flight(self.dir, t.rank)
                asked[path] = os.stat(path).st_mtime_ns if os.path.exists(path) else 0
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGUSR2)
        deadline = time.monotonic() + FLIGHT_WAIT_S
        while time.monotonic() < deadline and any(
                not os.path.exists(p) or os.stat(p).st_mtime_ns == m for p, m in asked.items()):
            time.sleep(0.02)

    def _watch(self, t0: float) -> None:
        size, last_change, first_end, asked = -1, time.monotonic(), None, time.monotonic()
        while True:
            time.sleep(POLL_S)
            now = time.monotonic()
            if self.held:
                return self._stop("interrupted")
            tracks = self._tracks(watching=True)
            self.schedule.poll(now - t0, lambda r: faultlib.calls_entered(tracks[r]) if r in tracks else 0)
            ended = [i for i, a in self.agents.items() if a.poll() is not None]
            if len(ended) == len(self.agents):
                return
            if ended and first_end is None:
                first_end = now
            if first_end is not None and now - first_end > AGENTS_GRACE_S:
                # the job is over (torchrun gave up, or finished without them): the agents left are waiting for a
                # rendezvous that will not come, as a node that rejoined after the others stopped would
                waiting = [hostname(i) for i in self.agents if i not in ended]
                self.schedule.injected.append({"t": time.time(), "elapsed": now - t0, "node": None, "kind": "end",
                                      "what": f"the torchrun agent on {', '.join(waiting)} was still running "
                                              f"{AGENTS_GRACE_S:g} s after the one on "
                                              f"{', '.join(hostname(i) for i in ended)} ended; the sandbox ended it"})
                return self._stop("agents")
            grown = sum(len(t.events) for t in tracks.values())
            if grown != size:
                size, last_change = grown, now
            if min(now - last_change, now - asked) >= self.settings.hang_after:
                # quiet traces: some workers may be blocked where the tracer cannot see (a collective made in C++)
                self._ask_flight(tracks)
                asked, tracks = time.monotonic(), self._tracks(watching=True)
            live = {r: t for r, t in tracks.items() if t.exit_code is None}
            d = policy.decide(tracks, time.time(), elapsed=now - t0, quiet_s=now - last_change, failed_since=None,
                              settings=self.settings) if live else None
            if now - t0 > self.settings.timeout:
                return self._stop(policy.TIMEOUT)
            if d is not None and d.stop == policy.HANG:  # a worker's failure is torchrun's to handle
                self.detect_s = d.blocked_s
                self._stacks(live)
                return self._stop(policy.HANG)

    def _reboot(self, i: int) -> None:
        """A node the sandbox killed comes back: its old agent reaped, a fresh one started (as a scheduler would)."""
        self._reap_agent(i)
        self._start_agent(i)

    def _reap_agent(self, i: int) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILLed: it is gone; only a zombie could wait
            self.agents[i].wait(timeout=AGENT_EXIT_S)

    def _stacks(self, live: dict) -> None:
        """SIGUSR1 to every live worker (`sandbox.trace` dumps its Python stack), then a bounded wait."""
        for t in live.values():
            pid = (t.hello or {}).get("pid")
            with contextlib.suppress(ProcessLookupError):
                if pid:
                    os.kill(pid, signal.SIGUSR1)
        time.sleep(STACK_WAIT_S)

    def _stop(self, why: str) -> None:
        self.stopped_for = None if why == "agents" else why  # agents left waiting: the verdict is the traces'
        log.info("stopping the run: %s", why)
        for i in range(self.nnodes):  # agents and workers alike: every process inside the nodes
            self.cluster.kill_node(i)
        for i in self.agents:
            self._reap_agent(i)

    def _teardown(self) -> None:
        self.traces.close()
        for i, a in self.agents.items():
            if a.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(a.pid, signal.SIGKILL)
                self._reap_agent(i)
        if self.cluster is not None:
            self.cluster.close()
        if self.owns_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------------------------------- the result
    def _restarts(self) -> int:
        """How often torchrun restarted the workers: the highest restart count its agents' rendezvous reported."""
        counts = [0]
        for i in range(self.nnodes):
            text = events.read_text(rundir.agent_log(self.dir, i))
            counts += [int(m.group(1)) for m in RESTARTED.finditer(text)]
        return max(counts)

    def _value(self, rank: int) -> bytes | None:
        """What a worker left as its value (a catalogue variant run under torchrun: sandbox.bugs._entry), if any."""
        try:
            with open(rundir.result(self.dir, rank), "rb") as f:
                return f.read()
        except FileNotFoundError:  # a script's worker: scripts return nothing
            return None

    def _assemble(self, wall: float) -> RunResult:
        injected = self.schedule.injected if self.schedule else []
        tracks = killed_crashed(self._tracks(), [p for f in injected if f["kind"] == "kill" for p in f["pids"]])
        for r in range(self.n):
            tracks.setdefault(r, events.RankTrack(r))
        j = policy.judge(tracks, self.stopped_for, timeout=self.settings.timeout, blocked_s=self.detect_s)
        ranks = [RankResult.from_track(t, j.outcomes[r], events.read_text(rundir.log(self.dir, r)),
                                       self._value(r) if j.outcomes[r] == "ok" else None)
                 for r, t in sorted(tracks.items())]
        ranks = [rr if rr.host else _with_host(rr, self.topology.host_of(rr.rank)) for rr in ranks]
        diag = j.diagnosis
        killed = [f for f in injected if f["kind"] == "kill"]
        if j.verdict != "ok" and killed and self.stopped_for != "interrupted":
            diag = faultlib.node_failure(killed[-1], diag, ranks, self.topology, after="With --max-restarts 0 torchrun "
                                         "does not restart the workers: the work since the last checkpoint is lost."
                                         if self.max_restarts == 0 else "")
        diag = on_nodes(faultlib.stated(diag, injected, self.schedule.faults if self.schedule else []), ranks)
        restarts = self._restarts()
        if restarts:
            diag = diag.noted(f"The workers were restarted {restarts} time{'s' if restarts != 1 else ''} by torchrun "
                              f"(--max-restarts {self.max_restarts}); this report is the last attempt's" + (
                                  "." if self.owns_dir else
                                  f", the earlier ones' traces are in {os.path.join(self.dir, rundir.ATTEMPTS)}/."))
        codes = {i: a.returncode for i, a in self.agents.items()}
        if j.verdict == "ok" and any(c not in (0, None) for c in codes.values()):
            diag = diag.noted("torchrun's agents exited with " + ", ".join(f"{hostname(i)}: {c}" for i, c in codes.items()))
        evs = sorted((e for t in tracks.values() for e in t.events), key=lambda e: e.get("t", 0))
        evs += [f for f in injected if f.get("label")]  # what the timeline draws
        return RunResult(verdict=j.verdict, world_size=self.n, wall_s=wall, diagnosis=diag, ranks=ranks, events=evs,
                         run_dir=None if self.owns_dir else self.dir, warnings=j.warnings, ended_at=time.time())


def watched(tracks: dict, alive) -> dict:
    """The tracks as the hang rule must see them while torchrun runs the workers. A worker that ended well has
    finished (exit 0). One that failed or is gone without a last line (killed with its node, ended by its agent) is
    torchrun's to handle: it restarts the workers, or gives up and its agent ends. Until then the rank counts as not
    started: its peers' new attempt may already wait in init_process_group for it, and a rank that looked finished
    would make that wait look hopeless to the hang rule, which would end the job in the middle of torchrun's restart.
    `alive(pid)`: whether a process still runs."""
    out = {}
    for r, t in tracks.items():
        if t.end is not None and t.end.get("outcome") == "ok":
            t.exit_code = 0
        elif t.end is not None or (t.hello and not alive(t.hello["pid"])):
            t = events.RankTrack(r)
        out[r] = t
    return out


def killed_crashed(tracks: dict, pids: list[int]) -> dict:
    """The tracks with the workers the sandbox killed (with their node) known as killed, as a launcher knows its
    processes' exit status: crashed, wherever they were. Read from their files alone, a worker killed inside a
    collective would look hung, and its peers' lost connections the launcher tearing a hang down."""
    for t in tracks.values():
        if t.hello and t.hello.get("pid") in pids and t.end is None:
            t.pid, t.exit_code = t.hello["pid"], -signal.SIGKILL
    return tracks


def _stamps(directory: str, pattern) -> list[tuple[str, int]]:
    """(name, mtime) of the files in directory whose names match: whether any changed since the last look."""
    out = []
    for name in sorted(os.listdir(directory)):
        if pattern.fullmatch(name):
            with contextlib.suppress(FileNotFoundError):  # moved away meanwhile (a restarted worker's earlier dump)
                out.append((name, os.stat(os.path.join(directory, name)).st_mtime_ns))
    return out


def _with_host(rr: RankResult, host: str) -> RankResult:
    import dataclasses

    return dataclasses.replace(rr, host=host)


def run_script(path: str, argv=(), *, module: bool = False, **kw) -> RunResult:
    """`sandbox.launcher.run_script`'s twin for `--launcher torchrun`: the script (or module) on K nodes' agents."""
    target = {"kind": "module", "name": path, "argv": list(argv)} if module else \
        {"kind": "script", "path": os.path.abspath(path), "argv": list(argv)}
    if not module and not os.path.isfile(path):
        raise UsageError(f"{path} is not a file.")
    return AgentsRun(target, **kw).run()
