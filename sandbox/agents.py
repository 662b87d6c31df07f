"""`--launcher torchrun`: PyTorch's own elastic agent on every simulated node, the sandbox's tracer in its workers.

    python -m sandbox.run --launcher torchrun --nnodes 2 --nproc-per-node 2 train.py
    python -m sandbox.run --launcher torchrun --nnodes 2 --nproc-per-node 2 --max-restarts 1 --kill-node 1@3s train.py

Each node runs `python -m torch.distributed.run --nnodes K --nproc-per-node P --rdzv-backend c10d --rdzv-endpoint
node0:29400 ... -m sandbox.trace --trace-dir DIR script.py`, so rendezvous, rank assignment, `--max-restarts` and
membership changes are torchrun's own. The sandbox does what a person at the cluster would: it watches the traces
the workers write (the hang rule is the same as for its own launcher), injects faults from outside the nodes, and
tears everything down. A node killed here comes back at once with a fresh agent, as a cluster scheduler restarts a
machine's job: whether the job goes on is torchrun's decision (`--max-restarts`).

The verdict is the one `python -m sandbox.diagnose DIR` gives the last attempt's traces; a worker restarted by
torchrun moves its earlier attempt's trace to DIR/attempts/ (`sandbox.trace`), and the report says what was
injected, which node died, and how often torchrun restarted the workers.
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
from dataclasses import dataclass

from sandbox import defaults, events, flight, nodes, policy, words
from sandbox._run import options
from sandbox._run.assemble import on_nodes
from sandbox._run.options import Interrupted, UsageError
from sandbox._run.start import ranks_env
from sandbox.result import Diagnosis, RankResult, RunResult

log = logging.getLogger("sandbox.launcher")

RDZV_PORT = 29400     # torchrun's own default; free in node0's namespace, which nothing else uses
POLL_S = 0.1          # how often the sandbox looks at the agents and the traces
STACK_WAIT_S = 1.0    # how long hung workers get to write their Python stacks
AGENT_EXIT_S = 5.0    # how long a killed node's agent may take to be reaped
AGENTS_GRACE_S = 10.0  # once one agent has ended by itself, how long the others get to end too
WATCH_ENV = "SANDBOX_WATCH_PID"  # the launcher's pid, for workers that must not outlive it
RESTARTED = re.compile(r"restart_count=(\d+)")  # torchrun's "Rendezvous complete for workers. Result: ..." line


@dataclass(frozen=True, kw_only=True)
class Fault:
    """A fault the sandbox injects from outside the nodes. kind: "kill" (every process on the node) or "link-down"
    (the node's link, for `for_s` seconds). When: `at_s` seconds into the run, or when rank `at_call[0]` enters its
    `at_call[1]`-th traced call."""
    kind: str
    node: int
    at_s: float | None = None
    at_call: tuple[int, int] | None = None
    for_s: float | None = None

    def when(self) -> str:
        return f"at {self.at_s:g} s" if self.at_s is not None else \
            f"when rank {self.at_call[0]} entered its call {self.at_call[1]}"


FAULT_FORM = re.compile(r"^(\d+)@(?:(\d+(?:\.\d+)?)s|rank(\d+):(\d+))(?:\+(\d+(?:\.\d+)?)s)?$")


def parse_fault(kind: str, text: str) -> Fault:
    """`NODE@3s`, `NODE@rank2:5` (rank 2's 5th call), and for link-down a duration: `NODE@3s+5s`. ValueError in one
    sentence otherwise."""
    m = FAULT_FORM.match(text.strip())
    if m is None or (kind == "link-down") != (m.group(5) is not None) or (m.group(4) and int(m.group(4)) < 1):
        form = "NODE@3s+5s (down at 3 s, for 5 s)" if kind == "link-down" else "NODE@3s or NODE@rank2:5"
        raise ValueError(f"a --{kind} fault reads {form}, not {text!r}.")
    return Fault(kind=kind, node=int(m.group(1)), at_s=float(m.group(2)) if m.group(2) else None,
                 at_call=(int(m.group(3)), int(m.group(4))) if m.group(3) else None,
                 for_s=float(m.group(5)) if m.group(5) else None)


class AgentsRun:
    """One run of a script under real torchrun agents, one per simulated node (see the module's docstring)."""

    def __init__(self, target: dict, *, nnodes: int, nproc_per_node: int, max_restarts: int = 0,
                 hang_after: float = defaults.HANG_AFTER_S, timeout: float = defaults.RUN_TIMEOUT_S,
                 trace_dir: str | None = None, node_options: dict | None = None, faults: list[Fault] = (),
                 env: dict | None = None, debug: str | None = None):
        world = nnodes * nproc_per_node
        options.check(world, hang_after, timeout, defaults.PG_TIMEOUT_S, env)
        options.check_nodes(world, nnodes, node_options)
        if nnodes < 2:
            raise UsageError("--launcher torchrun runs on simulated nodes: give --nnodes 2 or more.")
        for f in faults:
            if not 0 <= f.node < nnodes or (f.at_call and not 0 <= f.at_call[0] < world):
                raise UsageError(f"a {f.kind} fault names node {f.node}{f' and rank {f.at_call[0]}' if f.at_call else ''}"
                                 f", and this run has nodes 0-{nnodes - 1}, ranks 0-{world - 1}.")
        self.target, self.n, self.nnodes, self.per = target, world, nnodes, nproc_per_node
        self.max_restarts = max_restarts
        self.settings = policy.Settings(hang_after=float(hang_after), timeout=float(timeout))
        self.node_options, self.faults = dict(node_options or {}), list(faults)
        self.owns_dir = trace_dir is None
        self.dir = tempfile.mkdtemp(prefix="sandbox-run-") if trace_dir is None else options.trace_dir(trace_dir)
        self.env = dict(env or {}, **defaults.debug_env(debug))
        self.cluster: nodes.Cluster | None = None
        self.agents: dict[int, subprocess.Popen] = {}
        self.injected: list[dict] = []  # what was done to the nodes, when: the report's notes and the timeline
        self.held: list[int] = []
        self.stopped_for: str | None = None
        self.detect_s: float | None = None

    # ------------------------------------------------------------------------------------------- the agents
    def _agent_argv(self, node: nodes.Node) -> list[str]:
        t = self.target
        worker = ["-m", "sandbox.trace", "--trace-dir", self.dir, "--rank-log"] + (
            ["-m", t["name"]] if t["kind"] == "module" else [t["path"]]) + list(t["argv"])
        return node.wrap([sys.executable, "-m", "torch.distributed.run", "--nnodes", str(self.nnodes),
                          "--nproc-per-node", str(self.per), "--rdzv-backend", "c10d",
                          "--rdzv-endpoint", f"{self.cluster.node(0).hostname}:{RDZV_PORT}",
                          "--rdzv-id", os.path.basename(self.dir), "--max-restarts", str(self.max_restarts),
                          "--monitor-interval", "0.5", *worker])

    def _start_agent(self, i: int) -> None:
        env = ranks_env(self.env, False, self.dir, self.owns_dir, nodes=True)
        env[WATCH_ENV] = str(os.getpid())  # its workers end themselves if this process dies (sandbox.trace)
        env["LOGLEVEL"] = "INFO"  # torchrun's own account of rendezvous and restarts, in its node's log
        # A node that comes back after a kill joins with a fresh agent. With the rendezvous store shared (torchrun's
        # default) the rank-0 agent reuses the master address it published in the first round and never writes it
        # again, while the new agent waits for it in the new round's keys: both sit 60 s and fail (checked with
        # torch 2.13, dynamic_rendezvous.py next_rendezvous; restarts and the shared store: pytorch/pytorch#135712).
        # torchrun's opt-out publishes it in every round.
        env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
        out = open(os.path.join(self.dir, f"agent-node{i}.log"), "ab")
        try:  # its own session: the sandbox ends an agent with all it started, and a terminal's Ctrl-C is ours
            self.agents[i] = subprocess.Popen(self._agent_argv(self.cluster.node(i)), stdin=subprocess.DEVNULL,
                                              stdout=out, stderr=subprocess.STDOUT, env=env, cwd=os.getcwd(),
                                              start_new_session=True, preexec_fn=_die_with_us)
        finally:
            out.close()
        log.info("torchrun agent on node%d: pid %d", i, self.agents[i].pid)

    # ------------------------------------------------------------------------------------------- the run
    def run(self) -> RunResult:
        t0 = time.monotonic()
        with self._signals():
            try:
                self.cluster = nodes.Cluster(nnodes=self.nnodes, **self.node_options).__enter__()
                for i in range(self.nnodes):
                    self._start_agent(i)
                self._watch(t0)
                res = self._assemble(time.monotonic() - t0)
            finally:
                self._teardown()
        if self.held:
            raise Interrupted(res, self.held[0]) from None
        return res

    @contextlib.contextmanager
    def _signals(self):
        """SIGINT/SIGTERM during the run: noted; the watch stops the run and the report is still made."""
        def handler(signum, frame):
            self.held.append(signum)
        old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def _tracks(self) -> dict:
        if not os.path.exists(os.path.join(self.dir, events.META_FILE)):
            return {}
        tracks = policy.fill_missing(events.load_dir(self.dir))
        dumps = flight.read_run(self.dir)
        return flight.merge(tracks, dumps) if dumps else tracks

    def _watch(self, t0: float) -> None:
        size, last_change, first_end = -1, time.monotonic(), None
        while True:
            time.sleep(POLL_S)
            now = time.monotonic()
            if self.held:
                return self._stop("interrupted")
            tracks = self._tracks()
            self._inject(now - t0, tracks)
            ended = [i for i, a in self.agents.items() if a.poll() is not None]
            if len(ended) == len(self.agents):
                return
            if ended and first_end is None:
                first_end = now
            if first_end is not None and now - first_end > AGENTS_GRACE_S:
                # the job is over (torchrun gave up, or finished without them): the agents left are waiting for a
                # rendezvous that will not come, as a node that rejoined after the others stopped would
                waiting = [f"node{i}" for i in self.agents if i not in ended]
                self.injected.append({"t": time.time(), "elapsed": now - t0, "node": None, "kind": "end",
                                      "what": f"the torchrun agent on {', '.join(waiting)} was still waiting for a "
                                              f"rendezvous {AGENTS_GRACE_S:g} s after the job ended; the sandbox "
                                              "ended it"})
                return self._stop("agents")
            grown = sum(len(t.events) for t in tracks.values())
            if grown != size:
                size, last_change = grown, now
            live = {r: t for r, t in tracks.items() if t.end is None}
            d = policy.decide(live, time.time(), elapsed=now - t0, quiet_s=now - last_change, failed_since=None,
                              settings=self.settings) if live else None
            if now - t0 > self.settings.timeout:
                return self._stop(policy.TIMEOUT)
            if d is not None and d.stop == policy.HANG:  # a worker's failure is torchrun's to handle
                self.detect_s = d.blocked_s
                self._stacks(live)
                return self._stop(policy.HANG)

    def _inject(self, elapsed: float, tracks: dict) -> None:
        for f in list(self.faults):
            calls = _calls(tracks[f.at_call[0]]) if f.at_call and f.at_call[0] in tracks else 0
            due = (f.at_s is not None and elapsed >= f.at_s) or (f.at_call is not None and calls >= f.at_call[1])
            if not due:
                continue
            self.faults.remove(f)
            name = self.cluster.node(f.node).hostname
            if f.kind == "kill":
                pids = self.cluster.kill_node(f.node)
                self._reap_agent(f.node)
                self.injected.append({"t": time.time(), "elapsed": elapsed, "node": f.node, "kind": "kill",
                                      "what": f"{name} was killed {f.when()} ({len(pids)} processes: its torchrun "
                                              "agent and its workers); it came back with a fresh agent"})
                self._start_agent(f.node)
            else:
                self.cluster.set_link(f.node, up=False)
                self.injected.append({"t": time.time(), "elapsed": elapsed, "node": f.node, "kind": "link-down",
                                      "what": f"{name}'s link went down {f.when()} for {f.for_s:g} s"})
                self.faults.append(Fault(kind="link-up", node=f.node, at_s=elapsed + f.for_s))
            log.info("fault: %s", self.injected[-1]["what"])
        for f in [f for f in self.faults if f.kind == "link-up" and elapsed >= f.at_s]:
            self.faults.remove(f)
            self.cluster.set_link(f.node, up=True)

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
            text = events.read_text(os.path.join(self.dir, f"agent-node{i}.log"))
            counts += [int(m.group(1)) for m in RESTARTED.finditer(text)]
        return max(counts)

    def _node_failure(self, kill: dict, diag: Diagnosis, ranks: list[RankResult]) -> Diagnosis:
        """A node the sandbox killed, and the job did not get over it: the dead node is the cause, whatever its
        peers did next (they lost their connections, or their agent ended them mid-call)."""
        dead = list(range(kill["node"] * self.per, (kill["node"] + 1) * self.per))
        peers = [rr.rank for rr in ranks if rr.rank not in dead and rr.outcome != "ok"]
        cause = (f"Node{kill['node']} died: {kill['what'].split(' (')[0].split(' was ', 1)[1]}, with "
                 f"{words.ranks(dead)} on it, and the job could not go on without them")
        cause += (f" ({words.ranks(peers)} then failed or were ended: a consequence)." if peers else ".")
        if self.max_restarts == 0:
            cause += " With --max-restarts 0 torchrun does not restart the workers: the work since the last" \
                     " checkpoint is lost."
        return Diagnosis(kind="node_failure", cause=cause, culprit_ranks=dead,
                         details={**diag.details, "node": f"node{kill['node']}", "rules_said": diag.summary})

    def _assemble(self, wall: float) -> RunResult:
        tracks = self._tracks()
        for r in range(self.n):
            tracks.setdefault(r, events.RankTrack(r))
        j = policy.judge(tracks, self.stopped_for, timeout=self.settings.timeout, blocked_s=self.detect_s)
        ranks = [RankResult.from_track(t, j.outcomes[r], events.read_text(os.path.join(self.dir, f"rank-{r}.log")))
                 for r, t in sorted(tracks.items())]
        hosts = [f"node{r // self.per}" for r in range(self.n)]
        ranks = [rr if rr.host else _with_host(rr, hosts[rr.rank]) for rr in ranks]
        diag = j.diagnosis
        killed = [f for f in self.injected if f["kind"] == "kill"]
        if j.verdict != "ok" and killed and self.stopped_for != "interrupted":
            diag = self._node_failure(killed[-1], diag, ranks)
        diag = on_nodes(diag, ranks)
        for f in self.injected:
            if not (f in killed and diag.kind == "node_failure"):
                diag = diag.noted(f"{f['what'][0].upper()}{f['what'][1:]}.")
        restarts = self._restarts()
        if restarts:
            diag = diag.noted(f"torchrun restarted the workers {restarts} time{'s' if restarts != 1 else ''} "
                              f"(--max-restarts {self.max_restarts}); this report is the last attempt's, the earlier"
                              " traces are in the trace directory's attempts/.")
        codes = {i: a.returncode for i, a in self.agents.items()}
        if j.verdict == "ok" and any(c not in (0, None) for c in codes.values()):
            diag = diag.noted("torchrun's agents exited with " + ", ".join(f"node{i}: {c}" for i, c in codes.items()))
        evs = sorted((e for t in tracks.values() for e in t.events), key=lambda e: e.get("t", 0))
        evs += [{"ev": "fault", "t": f["t"], "node": f["node"], "kind": f["kind"], "what": f["what"]}
                for f in self.injected]
        return RunResult(verdict=j.verdict, world_size=self.n, wall_s=wall, diagnosis=diag, ranks=ranks, events=evs,
                         run_dir=None if self.owns_dir else self.dir, warnings=j.warnings, ended_at=time.time())


def _die_with_us() -> None:
    """In the agent, before exec (kept across the execs of `ip netns exec`, `unshare` and `sh`): SIGKILL when the
    launcher dies, even by SIGKILL. Its workers, in sessions of their own, watch the launcher themselves."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG


def _calls(t) -> int:
    """How many traced calls the rank has entered (call ids count from 1, in the order the rank made them)."""
    return max((e["id"] for e in t.events if e.get("ev") == "enter" and isinstance(e.get("id"), int)), default=0)


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
