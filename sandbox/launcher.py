"""Start N ranks fast, watch them, name what went wrong, and tear everything down.

    from sandbox import launch
    res = launch(my_module.train, world_size=4, args=(cfg,))
    print(res.verdict, res.diagnosis.summary)

One zygote process imports torch once and forks every rank (see `sandbox._zygote`), so a run costs about one
`import torch`, whatever N is. The zygote and its ranks form one process group of their own; the parent ends them
all with one signal, and the zygote and ranks die by themselves if the parent dies (PR_SET_PDEATHSIG).

The parent never imports torch. A run is a few steps: `_start` the zygote; `_watch` the zygote's pipe
(`sandbox.channel`) and the ranks' trace files (`sandbox.events`), asking the watchdog policy (`sandbox.policy.decide`)
whether to stop; `_stop` (ask every live rank for its Python stack with SIGUSR1, then end it); `_reap` (every exit
reported, nothing of ours left); `_assemble` the result, whose verdict comes from `sandbox.policy.judge`.
Run with `-v` (or `logging.getLogger("sandbox").setLevel(logging.INFO)`) to see each step.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Callable

from sandbox import events, policy
from sandbox import warm as zygotes
from sandbox.channel import Channel
from sandbox.events import RankTrack, Tail
from sandbox.result import Diagnosis, RankResult, RunResult

log = logging.getLogger("sandbox.launcher")

MAX_WORLD_SIZE = 128
POLL_S = 0.02               # how often the watchdog looks
STACK_WAIT_S = 1.0          # how long to wait for the ranks' stack dumps before ending them
STACK_WAIT_INTERRUPTED_S = 0.25  # the same after Ctrl-C: the user wants out
REAP_WAIT_S = 5.0           # how long the zygote gets to report every rank's exit
REAP_WAIT_INTERRUPTED_S = 0.2
LOG_CAP = 1 << 20           # the most of a rank's log a result carries (its tail)
_RUN_FILE = re.compile(r"(rank-\d+\.(jsonl|log)|stack-\d+\.txt|result-\d+\.pkl|zygote\.log|spec\.pkl|meta\.json)")
INTERRUPTED = "interrupted"


class UsageError(ValueError):
    """Bad input from the user: the CLI prints it as one sentence and exits 2."""


class Interrupted(KeyboardInterrupt):
    """Raised by `launch` after it cleaned up on Ctrl-C or SIGTERM; `.result` tells where every rank was,
    `.signal` which signal ended it."""

    def __init__(self, result: RunResult, signum: int = signal.SIGINT):
        super().__init__("interrupted")
        self.result = result
        self.signal = signum


def _importable(fn: Callable) -> bool:
    """Can the ranks import `fn` by name? A function in a module, or in a script's __main__; not one typed into a
    notebook cell or an interactive session, not a lambda, not a closure."""
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if mod is None or "<locals>" in qual or "<lambda>" in qual:
        return False
    if mod == "__main__":  # a script's: the ranks load it from its file (not `python -` or `python -c`)
        return os.path.isfile(getattr(sys.modules.get("__main__"), "__file__", None) or "")
    return True


def _func_target(fn: Callable) -> dict:
    if not callable(fn):
        raise UsageError(f"launch needs a function to run on the ranks, not {fn!r}.")
    qual = getattr(fn, "__qualname__", None) or repr(fn)
    if not _importable(fn):
        import cloudpickle  # the ranks get the function itself, by value, with what it refers to

        try:
            return {"kind": "func", "module": getattr(fn, "__module__", None), "qualname": qual,
                    "fn_bytes": cloudpickle.dumps(fn)}
        except Exception as e:  # noqa: BLE001  whatever cloudpickle raises, something the function holds is the cause
            raise UsageError(f"{qual} cannot be sent to the ranks: {e}") from None
    target = {"kind": "func", "module": fn.__module__, "qualname": qual}
    if fn.__module__ == "__main__":
        target["path"] = os.path.abspath(sys.modules["__main__"].__file__)
    return target


def launch(fn: Callable, world_size: int = 4, args: tuple = (), kwargs: dict | None = None, **options) -> RunResult:
    """Run `fn(*args, **kwargs)` on `world_size` ranks. `fn` may be importable (a module's function: the ranks
    import it) or not (typed into a notebook cell, a lambda, a closure: it is sent by value with cloudpickle).
    See `Run` for the options."""
    import cloudpickle

    target = _func_target(fn)
    try:
        target["payload"] = cloudpickle.dumps((tuple(args), dict(kwargs or {})))
    except Exception as e:  # noqa: BLE001  whatever pickling raises, the user's arguments are the cause
        raise UsageError(f"the arguments for {target['qualname']} cannot be pickled: {e}") from None
    return Run(target, world_size, **options).run()


def run_script(path: str, argv: list[str] | tuple = (), world_size: int = 4, module: bool = False,
               **options) -> RunResult:
    """Run a script (or with module=True a module, like `python -m`) as `world_size` ranks, torchrun-style."""
    if module:
        target = {"kind": "module", "name": path, "argv": list(argv)}
    else:
        if not os.path.isfile(path):
            raise UsageError(f"no such script: {path}")
        target = {"kind": "script", "path": os.path.abspath(path), "argv": list(argv)}
    return Run(target, world_size, **options).run()


def _check_options(world_size, hang_after, timeout, pg_timeout, env) -> None:
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise UsageError(f"the number of ranks must be a whole number of at least 1, not {world_size!r}.")
    if world_size > MAX_WORLD_SIZE:
        raise UsageError(f"{world_size} ranks is more than this sandbox runs on one machine"
                         f" (at most {MAX_WORLD_SIZE}).")
    for name, v in (("hang_after", hang_after), ("timeout", timeout), ("pg_timeout", pg_timeout)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
            raise UsageError(f"{name} must be a positive number of seconds, not {v!r}.")
    if env is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in dict(env).items()):
        raise UsageError("env must map names to strings (environment values are text).")


def _trace_dir(path: str) -> str:
    try:
        os.makedirs(path, exist_ok=True)
        for name in os.listdir(path):  # a fresh run: stale files would be read as this run's
            full = os.path.join(path, name)
            if _RUN_FILE.fullmatch(name) and os.path.isfile(full):
                os.unlink(full)
    except OSError as e:
        raise UsageError(f"cannot use {path} as the trace directory: {e.strerror or e}.") from None
    return os.path.abspath(path)


class Run:
    """One run. Options:

    init: call init_process_group (with `backend` and `pg_timeout`) before fn, destroy it after (func targets).
    backend: "gloo" (default) or "nccl"; gpu: one GPU per rank (NCCL by default).
    hang_after: seconds every live rank must sit in calls nobody can complete before it is a hang (a deadlock the
        traces prove, such as a collective mismatch or a send/send cycle, is named sooner).
    timeout: the whole run's limit, seconds; then ranks are stopped and the verdict is "timeout".
    env: extra environment for the ranks; debug: TORCH_DISTRIBUTED_DEBUG level ("DETAIL", "INFO").
    trace_dir: keep traces, logs and stacks there (default: a temp dir, removed after the run).
    on_output: callback(rank, line) for every line a rank prints, as it prints it.
    preload: modules the zygote imports before it forks, so every rank shares one import of them.
    warm: fork the run from this process's warm zygote (torch imported once per process: later runs cost a fork);
        None (default) means warm inside a Jupyter kernel, cold elsewhere (SANDBOX_WARM=1/0 overrides).
    """

    def __init__(self, target: dict, world_size: int, *, init: bool = False, backend: str | None = None,
                 gpu: bool = False, hang_after: float = 1.0, timeout: float = 120.0, pg_timeout: float = 60.0,
                 env: dict | None = None, debug: str | None = None, trace_dir: str | None = None,
                 on_output: Callable[[int, str], None] | None = None, preload: list[str] | tuple = (),
                 warm: bool | None = None):
        use_warm = warm
        _check_options(world_size, hang_after, timeout, pg_timeout, env)
        self.target, self.n = target, world_size
        self.settings = policy.Settings(hang_after=float(hang_after), timeout=float(timeout))
        self.on_output = on_output
        self.owns_dir = trace_dir is None
        self.dir = tempfile.mkdtemp(prefix="sandbox-run-") if trace_dir is None else _trace_dir(trace_dir)
        self.spec = {"target": target, "world_size": world_size, "run_dir": self.dir, "gpu": gpu, "init": init,
                     "backend": backend, "pg_timeout_s": float(pg_timeout), "env": dict(env or {}),
                     "run_id": "sandbox-" + uuid.uuid4().hex[:8], "sys_path": list(sys.path),
                     "preload": list(preload)}
        self.env_extra = {"TORCH_DISTRIBUTED_DEBUG": debug} if debug else {}
        self.tracks = {r: RankTrack(r) for r in range(world_size)}
        self.tails = {r: Tail(os.path.join(self.dir, f"rank-{r}.jsonl")) for r in range(world_size)}
        self.raw: dict[int, list[bytes]] = {r: [] for r in range(world_size)}
        self.last: dict[int, bytes] = {r: b"" for r in range(world_size)}
        self.log_tails = {r: Tail(os.path.join(self.dir, f"rank-{r}.log")) for r in range(world_size)} \
            if on_output else {}
        self.proc: zygotes.Handle | None = None
        self.warm = zygotes.default() if use_warm is None else bool(use_warm)
        self.channel: Channel | None = None
        self.fatal: dict | None = None
        self.zygote_done = False
        self.stopped_for: str | None = None
        self.detect_s: float | None = None
        self.ended_at: float | None = None
        self.stack_from: dict[int, int] = {}  # where each rank's last stack dump starts (earlier ones were stale)
        self.held: list[int] = []    # SIGINT/SIGTERM that arrived during the run: the watchdog stops it

    # ------------------------------------------------------------------------------------------- signals
    @contextlib.contextmanager
    def _signals(self):
        """While the run is up, SIGINT and SIGTERM are noted, not raised: the watchdog sees them within one poll
        and stops the run, and a signal during teardown cannot cut it short (every step of it is bounded).
        Only the main thread can set handlers; elsewhere a KeyboardInterrupt is caught where it lands."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum, frame):
            self.held.append(signum)

        old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in old:
            signal.signal(s, handler)
        try:
            yield
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    # ------------------------------------------------------------------------------------------- start
    def _start(self) -> None:
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun does for several workers per node
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo pairs listen on loopback only
        env.setdefault("NCCL_SOCKET_IFNAME", "lo")
        env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # count GPUs without initialising CUDA before fork
        env.update(self.env_extra)
        if not self.spec["gpu"]:  # a CPU run on any machine: the zygote and the ranks see no GPU, so nothing in
            env["CUDA_VISIBLE_DEVICES"] = ""  # them (FakeTensors on "cuda:1" included) can initialise real CUDA
        pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.update(SANDBOX_PARENT_PID=str(os.getpid()), SANDBOX_RUN_DIR=self.dir,
                   SANDBOX_OWNS_DIR="1" if self.owns_dir else "0")
        spec_path = os.path.join(self.dir, "spec.pkl")
        with open(spec_path, "wb") as f:  # a file, not a pipe: writing it can never block on the zygote
            pickle.dump(self.spec, f)
        log_path = os.path.join(self.dir, "zygote.log")
        if self.warm:
            self.proc = zygotes.fork_run(env, spec_path, log_path, interrupted=lambda: bool(self.held))
            log.info("run forked by the warm zygote (pid %d) for %d ranks, run directory %s", self.proc.pid, self.n,
                     self.dir)
        else:
            env["SANDBOX_SPEC"] = spec_path
            self.proc = zygotes.cold(env, log_path)
            log.info("zygote started (pid %d) for %d ranks, run directory %s", self.proc.pid, self.n, self.dir)
        self.channel = Channel(self.proc.fd)

    # ------------------------------------------------------------------------------------------- reading
    def _messages(self, wait: float) -> None:
        for msg in self.channel.poll(wait):
            if "pid" in msg and "rank" in msg:
                self.tracks[msg["rank"]].pid = msg["pid"]
                if msg["rank"] == self.n - 1:
                    log.info("ranks forked: pids %s", [t.pid for t in self.tracks.values()])
            elif "exit" in msg:
                t = self.tracks[msg["exit"]]
                t.exit_code, t.exit_t = msg["code"], time.time()
                log.info("rank %d ended (exit status %d)", t.rank, t.exit_code)
            elif "fatal" in msg:
                self.fatal = msg
                log.info("the zygote could not start the ranks: %s", msg["fatal"])
            elif msg.get("ready"):
                log.info("zygote ready (torch %s)", msg.get("torch"))
            elif msg.get("done"):
                self.zygote_done = True
        if self.channel.eof and not self.zygote_done:
            log.info("the zygote's pipe closed")

    def _pump(self, wait: float, parse: bool = True) -> bool:
        """Read what the zygote and the ranks wrote; True if a trace grew. Trace lines are parsed only when
        `parse` is set: while the ranks run, the watchdog looks at each rank's last line alone, so tracing a busy
        loop costs the parent next to nothing."""
        self._messages(wait)
        grew = False
        for r, tail in self.tails.items():
            lines = tail.lines()
            if lines:
                grew = True
                self.raw[r].extend(lines)
                self.last[r] = lines[-1]
        if parse:
            self._parse()
        for r, tail in self.log_tails.items():
            for line in tail.lines():
                self.on_output(r, line.decode(errors="replace"))
        return grew

    def _parse(self) -> None:
        for r, lines in self.raw.items():
            t = self.tracks[r]
            for line in lines:
                ev = events.parse(line)
                if ev is not None:
                    t.feed(ev)
            lines.clear()

    def _may_block(self, t: RankTrack) -> bool:
        """Is rank t perhaps inside a call? Its last trace line tells, except after a `done` line (an NCCL call
        finished on the GPU while later ones may still be in flight): then its parsed track tells."""
        last = self.last[t.rank]
        if events.is_done(last):
            self._parse()
            return t.pending is not None
        return events.may_block(last)

    def _live(self) -> list[RankTrack]:
        return [t for t in self.tracks.values() if t.exit_code is None]

    @property
    def _over(self) -> bool:
        return self.channel.eof or self.zygote_done or self.fatal is not None or not self._live()

    # ------------------------------------------------------------------------------------------- the watchdog
    def _watch(self) -> None:
        start = last_change = time.monotonic()
        fail_t = None
        while not self._over:
            if self.held:
                log.info("interrupted (signal %d): stopping the run", self.held[0])
                self._stop(INTERRUPTED)
                return
            if self._pump(POLL_S, parse=False):
                last_change = time.monotonic()
            if self._over:
                break
            now = time.monotonic()
            if fail_t is None and any(t.exit_code not in (None, 0) for t in self.tracks.values()):
                fail_t = now
            blocked = all(self._may_block(t) for t in self._live())
            if fail_t is None and not blocked and now - start <= self.settings.timeout:
                continue
            self._parse()
            d = policy.decide(self.tracks, time.time(), elapsed=now - start, quiet_s=now - last_change,
                              failed_since=None if fail_t is None else now - fail_t, settings=self.settings)
            if d is not None and d.provable:
                log.info("%s: confirming while the stacks are taken", d.reason)
                blocked = {t.rank: t.pending["id"] for t in self._live() if t.pending is not None}
                self._ask_stacks([t for t in self._live() if t.pid], STACK_WAIT_S)
                if not self._confirmed(blocked):
                    log.info("%s, but a call returned while the stacks were taken: watching on", d.reason)
                    self.stack_from = {r: os.path.getsize(p) for r in self.tracks
                                       if os.path.exists(p := os.path.join(self.dir, f"stack-{r}.txt"))}
                    last_change = time.monotonic()
                    continue
            if d is not None:
                log.info("stopping the run: %s", d.reason)
                self.detect_s = d.blocked_s if d.stop == policy.HANG else None
                self._stop(d.stop, stacks_taken=d.provable)
                return

    # ------------------------------------------------------------------------------------------- stop and reap
    def _stop(self, why: str, stacks_taken: bool = False) -> None:
        """Fetch every live rank's Python stack (unless just done), then end the whole run."""
        self.stopped_for = why
        self.ended_at = time.time()
        self._pump(0)
        for t in self._live():  # ended by us, or (not forked yet) never to start
            t.ended_by_sandbox = True
        live = [t for t in self._live() if t.pid]
        if not stacks_taken:
            self._ask_stacks(live, STACK_WAIT_INTERRUPTED_S if why == INTERRUPTED else STACK_WAIT_S)
        self._pump(0)
        for t in live:  # one by one, so the zygote reaps each and reports its exit status
            try:
                os.kill(t.pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended on its own meanwhile
                pass
        log.info("ended ranks %s", [t.rank for t in live])
        if why == INTERRUPTED:
            self._kill()  # the user wants out: the zygote too, even if it is still starting or forking

    def _ask_stacks(self, live: list[RankTrack], wait: float) -> None:
        """SIGUSR1 to every live rank (faulthandler dumps its stack and it carries on); wait, bounded, for the dumps."""
        if live:
            log.info("asking ranks %s for their Python stacks", [t.rank for t in live])
        for t in live:
            try:
                os.kill(t.pid, signal.SIGUSR1)
            except ProcessLookupError:  # it ended on its own meanwhile: nothing to ask
                pass
        paths = {t.rank: os.path.join(self.dir, f"stack-{t.rank}.txt") for t in live}
        sizes: dict = {}
        deadline = time.monotonic() + wait
        while paths and time.monotonic() < deadline:
            if self.held and self.stopped_for != INTERRUPTED:  # Ctrl-C while we wait: end everything now
                break
            now = {r: (os.path.getsize(p) if os.path.exists(p) else 0) for r, p in paths.items()}
            if all(now[r] > self.stack_from.get(r, 0) for r in now) and now == sizes:
                break
            sizes = now
            time.sleep(0.03)

    def _confirmed(self, blocked: dict[int, int]) -> bool:
        """After a provable deadlock was named: are the ranks still inside the very calls they were in? gloo may yet
        pair two calls the traces call different (a barrier with a one-element all_reduce), and a loaded machine
        may hold back an exit line; taking the stacks gives them that time, and the traces are read again."""
        self._pump(0)
        return all(t.exit_code is None and t.pending is not None and t.pending["id"] == blocked.get(t.rank)
                   and not t.inflight for t in self.tracks.values() if t.rank in blocked)

    def _kill(self) -> None:
        """End the run's whole process group: the zygote, the ranks, and anything the ranks started."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # the group is already empty (PermissionError: macOS says so)
            pass

    def _reap(self) -> None:
        """Wait (bounded) for the zygote to report every exit, then make sure nothing of ours remains."""
        deadline = time.monotonic() + (REAP_WAIT_INTERRUPTED_S if self.held else REAP_WAIT_S)
        while not (self.channel.eof or self.zygote_done) and time.monotonic() < deadline:
            self._messages(0.05)
            if self.proc.poll() is not None:
                self._messages(0)
                break
            if self.held and deadline - time.monotonic() > REAP_WAIT_INTERRUPTED_S:
                deadline = time.monotonic() + REAP_WAIT_INTERRUPTED_S
        self._kill()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:  # SIGKILL cannot be refused; only an unkillable (D-state) process stays
            log.info("the zygote did not exit within 2 s of SIGKILL")
        self._kill()  # anything the ranks forked stays in our process group: end it too
        log.info("run's process group %d ended", self.proc.pid)

    # ------------------------------------------------------------------------------------------- the result
    def _read(self, name: str, cap: int = LOG_CAP, skip: int = 0) -> str:
        text = events.read_text(os.path.join(self.dir, name), cap)
        return text[skip:] if skip else text  # stack dumps are ASCII: bytes and characters line up

    def _assemble(self, wall: float) -> RunResult:
        self._pump(0)
        lost = [t.rank for t in self.tracks.values() if t.exit_code is None and not t.ended_by_sandbox]
        if self.fatal is None and self.stopped_for is None and lost and not self.zygote_done:
            zlog = self._read("zygote.log", 4000).strip().splitlines()
            self.fatal = {"fatal": f"the process that starts the ranks died early ({zlog[-1] if zlog else 'no message'})",
                          "traceback": "\n".join(zlog[-40:])}
        for t in self.tracks.values():
            t.stack = self._read(f"stack-{t.rank}.txt", skip=self.stack_from.get(t.rank, 0)) or None
        j = policy.judge(self.tracks, self.stopped_for, timeout=self.settings.timeout, blocked_s=self.detect_s)
        verdict, diag = j.verdict, j.diagnosis
        if self.fatal is not None and self.stopped_for != INTERRUPTED:
            verdict = "error"
            diag = Diagnosis(kind="rank_error", cause=f"The ranks could not start: {self.fatal['fatal']}",
                             details={"traceback": self.fatal.get("traceback")})
        zlog = None
        ranks = []
        for r, t in sorted(self.tracks.items()):
            value = None
            path = os.path.join(self.dir, f"result-{r}.pkl")
            if j.outcomes[r] == "ok" and os.path.exists(path):
                with open(path, "rb") as f:
                    value = f.read()
            output = self._read(f"rank-{r}.log")
            if not output and t.hello is None and t.exit_code not in (None, 0):
                # it failed before it could open its own log: what it said went to the zygote's
                zlog = self._read("zygote.log") if zlog is None else zlog
                output = zlog
            ranks.append(RankResult.from_track(t, j.outcomes[r], output, value))
        if self.fatal is not None and self.stopped_for != INTERRUPTED:
            zlog = self._read("zygote.log") if zlog is None else zlog
            ranks = [dataclasses.replace(rr, error={"type": "start", "message": self.fatal["fatal"]},
                                         output=rr.output or zlog) for rr in ranks]
        evs = sorted((e for t in self.tracks.values() for e in t.events), key=lambda e: e.get("t", 0))
        return RunResult(verdict=verdict, world_size=self.n, wall_s=wall, diagnosis=diag, ranks=ranks, events=evs,
                         run_dir=None if self.owns_dir else self.dir, pgid=self.proc.pid if self.proc else None,
                         ended_at=self.ended_at or time.time(), warnings=j.warnings)

    def run(self) -> RunResult:
        t0 = time.monotonic()
        with self._signals():
            try:
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
                if self.fatal is not None and self.fatal.get("usage"):
                    self._reap()
                    raise UsageError(self.fatal["fatal"])
                res = None
                if self.proc is not None:
                    self._reap()
                    res = self._assemble(time.monotonic() - t0)
                    if self.held and self.stopped_for != INTERRUPTED:  # the signal came during the teardown
                        self.stopped_for = INTERRUPTED
                        res = self._assemble(res.wall_s)
                if res is None:  # interrupted before the zygote could even start
                    res = RunResult(verdict=INTERRUPTED, world_size=self.n, wall_s=time.monotonic() - t0,
                                    diagnosis=Diagnosis(kind="none", cause="Interrupted before the ranks started."),
                                    ranks=[RankResult(rank=r, outcome="stopped") for r in range(self.n)])
            finally:
                self._cleanup()
        if self.held:
            raise Interrupted(res, self.held[0]) from None
        return res

    def _cleanup(self) -> None:
        self._kill()
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    self.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:  # see _reap: nothing more can be done to a SIGKILLed process
                    pass
            self.proc.close()
        for tail in list(self.tails.values()) + list(self.log_tails.values()):
            tail.close()
        if self.owns_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
