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

The run's lifecycle is the sandbox's own (`sandbox._run.lifecycle`: the same watch, hang rule and deadlock
confirmation, the same stack and recorder requests, stop and report); this module is its other way of starting
processes, `TorchrunProcs`, and the door, `AgentsRun`. What differs is what a launcher knows. The sandbox knows a
worker from its trace alone (its pid in its hello). A worker that failed is torchrun's to restart, so the hang rule
counts it as not started until torchrun restarts it or gives up (`watched`). The verdict is judged from the last
attempt's traces as `python -m sandbox.diagnose DIR` judges them, with the facts only the launcher has: the workers
it killed with their node crashed (from their files alone, one killed inside a collective looks hung), and the ones
it ended when it stopped the run were stopped or hung, as under its own launcher. A worker restarted by torchrun
moves its earlier attempt's files to DIR/attempts/ (`sandbox.trace`), and the report says what was injected, which
node died, and how often torchrun restarted the workers after a failure. Nodes are ordered by hostname, as torchrun's
rendezvous orders them (`sandbox.topology`).
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import time

from sandbox import defaults, events, policy, rundir
from sandbox._proc import alive
from sandbox._run import options
from sandbox._run.lifecycle import Lifecycle
from sandbox._run.options import UsageError
from sandbox._run.procs import Procs, pid_of
from sandbox._run.start import debug_settings, ranks_env
from sandbox._run.watch import ABANDONED
from sandbox.result import Diagnosis, RunResult, Verdict
from sandbox.topology import Topology, hostname

log = logging.getLogger("sandbox.launcher")
KEEP_ALIVE_S = 2  # the agents' rendezvous heartbeat (torchrun: 5 s); see _agent_argv

RDZV_PORT = 29400     # torchrun's own default; free in node0's namespace, which nothing else uses
AGENT_EXIT_S = 5.0    # how long a killed node's agent may take to be reaped
AGENTS_GRACE_S = 5.0   # once one agent has ended by itself, how long the others get to end too
RESTARTED = re.compile(r"restart_count=(\d+)")  # torchrun's "Rendezvous complete for workers. Result: ..." line


class AgentsRun(Lifecycle):
    """One run of a script under real torchrun agents, one per simulated node (see the module's docstring). The
    options are `sandbox._run.Run`'s that torchrun has, and `max_restarts` (torchrun's --max-restarts)."""

    def __init__(self, target: dict, *, nnodes: int, nproc_per_node: int, max_restarts: int = 0,
                 hang_after: float = defaults.HANG_AFTER_S, timeout: float = defaults.RUN_TIMEOUT_S,
                 trace_dir: str | None = None, node_options: dict | None = None, faults=(),
                 env: dict | None = None, debug: str | None = None):
        world = nnodes * nproc_per_node
        options.check(world, hang_after, timeout, defaults.PG_TIMEOUT_S, env)
        options.check_nodes(world, nnodes, node_options)
        if nnodes < 2:
            raise UsageError("--launcher torchrun runs on simulated nodes: give --nnodes 2 or more.")
        options.check_faults(list(faults), world, nnodes)
        super().__init__(topology=Topology(nnodes=nnodes, per_node=nproc_per_node, by_hostname=True),
                         hang_after=hang_after, timeout=timeout, trace_dir=trace_dir, node_options=node_options,
                         faults=faults)
        extra, unset = debug_settings(debug)
        self.procs = TorchrunProcs(self, target, max_restarts, dict(env or {}, **extra), unset)


class TorchrunProcs(Procs):
    """torchrun's elastic agent on every node (`sandbox._run.procs`): started, restarted after a kill, ended."""

    POLL_S = 0.1  # the agents' workers are seen through the run directory: a listing and a read of each trace
    AFTER_KILL = ": its torchrun agent and its workers; it came back with a fresh agent"

    def __init__(self, life, target: dict, max_restarts: int, env: dict, unset: tuple):
        super().__init__(life)
        self.target, self.max_restarts, self.env, self.unset = target, max_restarts, env, unset
        self.agents: dict[int, subprocess.Popen] = {}
        self.traces = events.DirTail(life.dir)  # what the watch reads as the workers write it
        self.now: dict[int, events.RankTrack] = {}
        self.size = -1
        self.first_end: float | None = None
        self.ended_pids: set[int] = set()  # the workers the sandbox ended when it stopped the run

    # ------------------------------------------------------------------------------------------- the agents
    def _agent_argv(self, node) -> list[str]:
        t, life = self.target, self.life
        worker = ["-m", "sandbox.trace", "--trace-dir", life.dir, "--rank-log"] + (
            ["-m", t["name"]] if t["kind"] == "module" else [t["path"]]) + list(t["argv"])
        # PDEATHSIG (kept across the execs of `ip netns exec`, `unshare` and `sh`): the agent gets SIGKILL when
        # this process dies, even by SIGKILL; its workers, in sessions of their own, watch it themselves. Set by a
        # program, not a preexec_fn: a caller with threads (a Jupyter kernel) could deadlock in one
        return ["setpriv", "--pdeathsig", "KILL"] + node.wrap([
            sys.executable, "-m", "torch.distributed.run", "--nnodes", str(life.topology.nnodes),
            "--nproc-per-node", str(life.topology.per_node), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{life.cluster.node(0).hostname}:{RDZV_PORT}",
            "--rdzv-id", os.path.basename(life.dir), "--max-restarts", str(self.max_restarts),
            "--monitor-interval", "0.5",
            # a node that died is dropped from the rendezvous once it has missed 3 heartbeats: every 2 s here
            # (torchrun's default is every 5 s), so a restart after a node failure waits 6 s for it, not 15
            "--rdzv-conf", f"keep_alive_interval={KEEP_ALIVE_S},keep_alive_max_attempt=3",
            # its own files in the run's directory: by default each agent leaves a torchelastic_* in /tmp
            "--log-dir", rundir.agent_dir(life.dir, node.hostname), *worker])

    def _start_agent(self, i: int) -> None:
        env = ranks_env(self.env, False, self.life.dir, self.life.owns_dir, self.unset, nodes=True)
        env[defaults.WATCH_PID_ENV] = str(os.getpid())  # its workers end themselves if this process dies
        env["LOGLEVEL"] = "INFO"  # torchrun's own account of rendezvous and restarts, in its node's log
        # A node that comes back after a kill joins with a fresh agent. With the rendezvous store shared (torchrun's
        # default) the rank-0 agent reuses the master address it published in the first round and never writes it
        # again, while the new agent waits for it in the new round's keys: both sit 60 s and fail (checked with
        # torch 2.13, dynamic_rendezvous.py next_rendezvous; restarts and the shared store: pytorch/pytorch#135712).
        # torchrun's opt-out publishes it in every round.
        env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
        # a node that comes back appends to its log; the first agent starts it afresh (a kept --trace-dir)
        out = open(rundir.agent_log(self.life.dir, i), "ab" if i in self.agents else "wb")
        try:  # its own session: the sandbox ends an agent with all it started, and a terminal's Ctrl-C is ours
            self.agents[i] = subprocess.Popen(self._agent_argv(self.life.cluster.node(i)), stdin=subprocess.DEVNULL,
                                              stdout=out, stderr=subprocess.STDOUT, env=env, cwd=os.getcwd(),
                                              start_new_session=True)
        finally:
            out.close()
        log.info("torchrun agent on %s: pid %d", hostname(i), self.agents[i].pid)

    def start(self) -> None:
        for i in range(self.life.topology.nnodes):
            self._start_agent(i)
            self.started = True

    def on_kill(self, i: int) -> None:
        """A node the sandbox killed comes back: its old agent reaped, a fresh one started (as a scheduler would)."""
        self._reap_agent(i)
        self._start_agent(i)

    def _reap_agent(self, i: int) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILLed: it is gone; only a zombie could wait
            self.agents[i].wait(timeout=AGENT_EXIT_S)

    # ------------------------------------------------------------------------------------------- reading
    def poll(self, wait: float) -> bool:
        time.sleep(wait)
        if not os.path.exists(os.path.join(self.life.dir, rundir.META)):
            return False
        self.now = policy.fill_missing(self.traces.tracks())
        size = sum(len(t.events) for t in self.now.values())
        grew, self.size = size != self.size, size
        return grew

    def tracks(self, parse: bool = True) -> dict[int, events.RankTrack]:
        return self.now

    def lines_read(self, rank: int) -> int:
        return self.traces.read.get(rank, 0)

    def watched(self, tracks: dict) -> dict:
        return watched(tracks, alive)

    def over(self, elapsed: float) -> bool | str:
        ended = [i for i, a in self.agents.items() if a.poll() is not None]
        if len(ended) == len(self.agents):
            return True
        if ended and self.first_end is None:
            self.first_end = time.monotonic()
        if self.first_end is None or time.monotonic() - self.first_end <= AGENTS_GRACE_S:
            return False
        # the job is over (torchrun gave up, or finished without them): the agents left are waiting for a
        # rendezvous that will not come, as a node that rejoined after the others stopped would
        waiting = ", ".join(hostname(i) for i in self.agents if i not in ended)
        what = (f"the torchrun agent on {waiting} was still running {AGENTS_GRACE_S:g} s after the one on "
                f"{', '.join(hostname(i) for i in ended)} ended; the sandbox ended it")
        self.life.schedule.injected.append({"t": time.time(), "elapsed": elapsed, "node": None, "kind": "end",
                                            "what": what})
        return what

    # ------------------------------------------------------------------------------------------- end, close
    def end(self, live: list, why: str | None) -> None:
        """Every process inside the nodes, agents and workers alike; the workers that were live are known as ended
        by the sandbox (unless the job was over by itself). The live workers are frozen first, on every node, then
        the nodes killed one by one: a worker left running while another node dies would see its peer's connection
        close, raise and end its own script as an error before its node's turn, which made a hang read as one."""
        pids = {pid for t in live if (pid := pid_of(t))}
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
                os.kill(pid, signal.SIGSTOP)
        if why != ABANDONED:
            self.ended_pids |= pids
        for i in range(self.life.topology.nnodes):
            self.life.cluster.kill_node(i)
        for i in self.agents:
            self._reap_agent(i)

    def close(self) -> None:
        self.traces.close()
        for i, a in self.agents.items():
            if a.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
                    os.killpg(a.pid, signal.SIGKILL)
                self._reap_agent(i)

    # ------------------------------------------------------------------------------------------- the result
    def final(self) -> dict[int, events.RankTrack]:
        """The last attempt's tracks from the files, with what the launcher knows: the workers killed with their
        node crashed, the ones it ended when it stopped the run ended by it."""
        life = self.life
        tracks = policy.fill_missing(events.load_dir(life.dir)) \
            if os.path.exists(os.path.join(life.dir, rundir.META)) else {}
        injected = life.schedule.injected if life.schedule else []
        tracks = killed_crashed(tracks, [p for f in injected if f["kind"] == "kill" for p in f["pids"]])
        for t in tracks.values():
            if t.hello and t.hello.get("pid") in self.ended_pids and t.end is None and t.exit_code is None:
                t.pid, t.ended_by_sandbox = t.hello["pid"], True
        for r in range(life.n):
            tracks.setdefault(r, events.RankTrack(r))
        return tracks

    def after_node_failure(self) -> str:
        return ("With --max-restarts 0 torchrun does not restart the workers: the work since the last checkpoint is "
                "lost.") if self.max_restarts == 0 else ""

    def _restarts(self) -> int:
        """How often torchrun restarted the workers: the highest restart count its agents' rendezvous reported."""
        counts = [0]
        for i in range(self.life.topology.nnodes):
            text = events.read_text(rundir.agent_log(self.life.dir, i))
            counts += [int(m.group(1)) for m in RESTARTED.finditer(text)]
        return max(counts)

    def noted(self, diag: Diagnosis, verdict: str) -> Diagnosis:
        life, restarts = self.life, self._restarts()
        if restarts:
            diag = diag.noted(f"The workers were restarted {restarts} time{'s' if restarts != 1 else ''} by torchrun "
                              f"(--max-restarts {self.max_restarts}); this report is the last attempt's" + (
                                  "." if life.owns_dir else
                                  f", the earlier ones' traces are in {os.path.join(life.dir, rundir.ATTEMPTS)}/."))
        codes = {i: a.returncode for i, a in self.agents.items()}
        if verdict == Verdict.OK and any(c not in (0, None) for c in codes.values()):
            diag = diag.noted("torchrun's agents exited with " + ", ".join(f"{hostname(i)}: {c}"
                                                                         for i, c in codes.items()))
        return diag


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


def run_script(path: str, argv=(), *, module: bool = False, **kw) -> RunResult:
    """`sandbox.launcher.run_script`'s twin for `--launcher torchrun`: the script (or module) on K nodes' agents."""
    return AgentsRun(options.script_target(path, argv, module), **kw).run()
