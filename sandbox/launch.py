"""Start N ranks fast, watch them, name what went wrong, and tear everything down.

    from sandbox import launch
    res = launch(my_module.train, world_size=4, args=(cfg,))
    print(res.verdict, res.diagnosis.summary)

One zygote process imports torch once and forks every rank (see `sandbox._zygote`), so a run costs about one
`import torch`, whatever N is. The zygote and its ranks form one process group of their own; the parent ends them
all with one signal, and the zygote and ranks die by themselves if the parent dies (PR_SET_PDEATHSIG).

The parent never imports torch: it reads each rank's trace file (one JSON line per enter/exit of a distributed
call) and applies the hang rule: when every rank still alive has sat for `hang_after` seconds inside a distributed
call that its peers cannot complete, the run is deadlocked. It then asks every rank for its Python stack
(SIGUSR1 -> faulthandler), ends them, and diagnoses.
"""
from __future__ import annotations

import json
import math
import os
import re
import pickle
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Callable

from sandbox.diagnose import (RankTrack, diagnose_failure, diagnose_hang, diagnose_timeout, progress_possible)
from sandbox.diagnose import Diagnosis
from sandbox.result import RankResult, RunResult

MAX_WORLD_SIZE = 128
_RUN_FILE = re.compile(r"(rank-\d+\.(jsonl|log)|stack-\d+\.txt|result-\d+\.pkl|zygote\.log|spec\.pkl)")
_POLL_S = 0.02
_LOG_CAP = 1 << 20


class UsageError(ValueError):
    """Bad input from the user: the CLI prints it as one sentence and exits 2."""


class Interrupted(KeyboardInterrupt):
    """Raised by `launch` after it cleaned up on Ctrl-C or SIGTERM; `.result` tells where every rank was."""

    def __init__(self, result: RunResult):
        super().__init__("interrupted")
        self.result = result


class _Tail:
    """Reads the lines appended to a file since the last call."""

    def __init__(self, path: str):
        self.path, self.f, self.buf = path, None, b""

    def lines(self) -> list[bytes]:
        if self.f is None:
            try:
                self.f = open(self.path, "rb")
            except FileNotFoundError:
                return []
        data = self.f.read()
        if not data:
            return []
        self.buf += data
        *done, self.buf = self.buf.split(b"\n")
        return done

    def close(self):
        if self.f is not None:
            self.f.close()


def _func_target(fn: Callable) -> dict:
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if mod is None or "<locals>" in qual or "<lambda>" in qual:
        raise UsageError(f"launch needs a function the ranks can import (defined at module level), not {qual or fn!r}.")
    target = {"kind": "func", "module": mod, "qualname": qual}
    if mod == "__main__":
        path = getattr(sys.modules["__main__"], "__file__", None)
        if not path:
            raise UsageError(f"{qual} is defined in an interactive session; the ranks can only run functions from a"
                             " file: move it into a module (or a script) and import it.")
        target["path"] = os.path.abspath(path)
    return target


def launch(fn: Callable, world_size: int = 4, args: tuple = (), kwargs: dict | None = None, **options) -> RunResult:
    """Run `fn(*args, **kwargs)` on `world_size` ranks. See `Run` for the options."""
    target = _func_target(fn)
    try:
        target["payload"] = pickle.dumps((tuple(args), dict(kwargs or {})))
    except Exception as e:  # noqa: BLE001
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


class Run:
    """One run. Options:

    init: call init_process_group (with `backend` and `pg_timeout`) before fn, destroy it after (func targets).
    backend: "gloo" (default) or "nccl"; gpu: one GPU per rank (NCCL by default).
    hang_after: seconds every live rank must sit in calls nobody can complete before it is a hang.
    timeout: the whole run's limit, seconds; then ranks are stopped and the verdict is "timeout".
    env: extra environment for the ranks; debug: TORCH_DISTRIBUTED_DEBUG level ("DETAIL", "INFO").
    trace_dir: keep traces, logs and stacks there (default: a temp dir, removed after the run).
    on_output: callback(rank, line) for every line a rank prints, as it prints it.
    preload: modules the zygote imports before it forks, so every rank shares one import of them.
    """

    def __init__(self, target: dict, world_size: int, *, init: bool = False, backend: str | None = None,
                 gpu: bool = False, hang_after: float = 1.0, timeout: float = 120.0, pg_timeout: float = 60.0,
                 env: dict | None = None, debug: str | None = None, trace_dir: str | None = None,
                 on_output: Callable[[int, str], None] | None = None, preload: list[str] | tuple = ()):
        if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
            raise UsageError(f"the number of ranks must be a whole number of at least 1, not {world_size!r}.")
        if world_size > MAX_WORLD_SIZE:
            raise UsageError(f"{world_size} ranks is more than this sandbox runs on one machine"
                             f" (at most {MAX_WORLD_SIZE}).")
        for name, v in (("hang_after", hang_after), ("timeout", timeout), ("pg_timeout", pg_timeout)):
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise UsageError(f"{name} must be a positive number of seconds, not {v!r}.")
        if env is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in dict(env).items()):
            raise UsageError("env must map names to strings (environment values are text).")
        self.target, self.n = target, world_size
        self.gpu, self.hang_after, self.timeout = gpu, float(hang_after), float(timeout)
        self.on_output = on_output
        self.owns_dir = trace_dir is None
        if trace_dir is None:
            self.dir = tempfile.mkdtemp(prefix="sandbox-run-")
        else:
            try:
                os.makedirs(trace_dir, exist_ok=True)
                for name in os.listdir(trace_dir):  # a fresh run: stale files would be read as this run's
                    path = os.path.join(trace_dir, name)
                    if _RUN_FILE.fullmatch(name) and os.path.isfile(path):
                        os.unlink(path)
            except OSError as e:
                raise UsageError(f"cannot use {trace_dir} as the trace directory: {e.strerror or e}.") from None
            self.dir = os.path.abspath(trace_dir)
        self.spec = {"target": target, "world_size": world_size, "run_dir": self.dir, "gpu": gpu, "init": init,
                     "backend": backend, "pg_timeout_s": float(pg_timeout), "env": dict(env or {}),
                     "run_id": "sandbox-" + uuid.uuid4().hex[:8], "sys_path": list(sys.path),
                     "preload": list(preload)}
        self.env_extra = {"TORCH_DISTRIBUTED_DEBUG": debug} if debug else {}
        self.tracks = {r: RankTrack(r) for r in range(world_size)}
        self.tails = {r: _Tail(os.path.join(self.dir, f"rank-{r}.jsonl")) for r in range(world_size)}
        self.raw: dict[int, list[bytes]] = {r: [] for r in range(world_size)}
        self.last: dict[int, bytes] = {r: b"" for r in range(world_size)}
        self.log_tails = {r: _Tail(os.path.join(self.dir, f"rank-{r}.log")) for r in range(world_size)} \
            if on_output else {}
        self.proc: subprocess.Popen | None = None
        self.fatal: dict | None = None
        self.done = False
        self.zygote_eof = False
        self.zygote_done = False
        self.stopped_for: str | None = None
        self.fail_t: float | None = None
        self.detect_s: float | None = None
        self.ended_at: float | None = None

    # ------------------------------------------------------------------------------------------- process plumbing
    def _start(self) -> None:
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun does for several workers per node
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo pairs listen on loopback only
        env.setdefault("NCCL_SOCKET_IFNAME", "lo")
        env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # count GPUs without initialising CUDA before fork
        env.update(self.env_extra)
        pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.update(SANDBOX_PARENT_PID=str(os.getpid()), SANDBOX_RUN_DIR=self.dir,
                   SANDBOX_OWNS_DIR="1" if self.owns_dir else "0")
        spec_path = os.path.join(self.dir, "spec.pkl")
        with open(spec_path, "wb") as f:  # a file, not a pipe: writing it can never block on the zygote
            pickle.dump(self.spec, f)
        env["SANDBOX_SPEC"] = spec_path
        with open(os.path.join(self.dir, "zygote.log"), "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "sandbox._zygote"], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=err, start_new_session=True, env=env,
                                         close_fds=True)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._zbuf = b""

    def _zygote_messages(self, wait: float) -> None:
        if self.proc.stdout.closed:
            return
        fd = self.proc.stdout.fileno()
        r, _, _ = select.select([fd], [], [], wait)
        if not r:
            return
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not chunk:  # the zygote is gone; without its "done" it died (killed, out of memory, no torch)
                self.done = True
                self.zygote_eof = True
                break
            self._zbuf += chunk
        *lines, self._zbuf = self._zbuf.split(b"\n")
        for line in lines:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "pid" in msg and "rank" in msg:
                self.tracks[msg["rank"]].pid = msg["pid"]
            elif "exit" in msg:
                t = self.tracks[msg["exit"]]
                t.exit_code, t.exit_t = msg["code"], time.time()
            elif "fatal" in msg:
                self.fatal = msg
            elif msg.get("done"):
                self.done = self.zygote_done = True

    def _pump(self, wait: float, parse: bool = True) -> None:
        """Read what the zygote and the ranks wrote. Trace lines are parsed only when `parse` is set: while the
        ranks run, the watchdog looks at each rank's last line alone, so tracing a busy loop costs the parent
        next to nothing."""
        self._zygote_messages(wait)
        for r, tail in self.tails.items():
            lines = tail.lines()
            if lines:
                self.raw[r].extend(lines)
                self.last[r] = lines[-1]
        if parse:
            self._parse()
        for r, tail in self.log_tails.items():
            for line in tail.lines():
                self.on_output(r, line.decode(errors="replace"))

    def _parse(self) -> None:
        for r, lines in self.raw.items():
            t = self.tracks[r]
            for line in lines:
                try:
                    t.feed(json.loads(line))
                except (json.JSONDecodeError, KeyError):
                    pass
            lines.clear()

    def _maybe_blocked(self) -> bool:
        """Cheap: is every live rank's last trace line the entry into a call?"""
        return all(self.last[t.rank].startswith(b'{"ev":"enter"') or b'"inflight":true' in self.last[t.rank]
                   for t in self._live())

    def _live(self) -> list[RankTrack]:
        return [t for t in self.tracks.values() if t.exit_code is None]

    # ------------------------------------------------------------------------------------------- the watchdog
    def _blocked_for(self, now: float) -> float:
        """How long every live rank has been inside a distributed call (0 if one is not)."""
        live = self._live()
        if not live or any(t.pending is None for t in live):
            return 0.0
        return now - max(t.pending["t"] for t in live)

    def _watch(self) -> None:
        start = time.monotonic()
        while not self.done and self.fatal is None:
            self._pump(_POLL_S, parse=False)
            if all(t.exit_code is not None for t in self.tracks.values()):
                self.done = True
                break
            now = time.time()
            failed = [t for t in self.tracks.values() if t.exit_code not in (None, 0)]
            if failed and self.fail_t is None:
                self.fail_t = time.monotonic()
            if self.fail_t is not None:
                # give the peers a moment to report what they saw, then end the ones that are stuck
                self._parse()
                since = time.monotonic() - self.fail_t
                if self._live() and (since >= self.hang_after or self._blocked_for(now) >= min(0.3, self.hang_after)):
                    self._stop("failure")
                    break
            elif self._maybe_blocked():
                self._parse()
                if self._blocked_for(now) >= self.hang_after and not progress_possible(self.tracks):
                    self.detect_s = self._blocked_for(now)
                    self._stop("hang")
                    break
            if time.monotonic() - start > self.timeout:
                self._parse()
                self._stop("timeout")
                break

    def _stop(self, why: str) -> None:
        """Fetch every live rank's Python stack, then end the whole run."""
        self.stopped_for = why
        self.ended_at = time.time()
        live = [t for t in self._live() if t.pid]
        for t in live:
            try:
                os.kill(t.pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
        paths = {t.rank: os.path.join(self.dir, f"stack-{t.rank}.txt") for t in live}
        sizes: dict = {}
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            now = {r: (os.path.getsize(p) if os.path.exists(p) else 0) for r, p in paths.items()}
            if all(now.values()) and now == sizes:
                break
            sizes = now
            time.sleep(0.03)
        self._pump(0)
        for t in live:  # the zygote reaps them and reports their exits; _reap then ends what is left
            try:
                os.kill(t.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for t in live:
            t.outcome = "hung" if (t.pending is not None and why in ("hang", "timeout", "interrupted")) else "stopped"

    def _kill(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _reap(self) -> None:
        """Wait (bounded) for the zygote to report every exit, then make sure nothing of ours remains."""
        deadline = time.monotonic() + 5.0
        while not self.done and time.monotonic() < deadline:
            self._zygote_messages(0.05)
            if self.proc.poll() is not None:
                self._zygote_messages(0)
                break
        self._kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._kill()  # anything the ranks forked stays in our process group: end it too
        self.proc.stdout.close()

    # ------------------------------------------------------------------------------------------- the result
    def _read(self, name: str, cap: int = _LOG_CAP) -> str:
        try:
            with open(os.path.join(self.dir, name), "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - cap))
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def _result(self, wall: float) -> RunResult:
        self._pump(0)
        lost = [t.rank for t in self.tracks.values() if t.exit_code is None and t.outcome is None]
        if self.fatal is None and self.stopped_for is None and lost and not self.zygote_done:
            log = self._read("zygote.log", 4000).strip().splitlines()
            why = log[-1] if log else "no message"
            self.fatal = {"fatal": f"the process that starts the ranks died early ({why})",
                          "traceback": "\n".join(log[-40:])}
        for t in self.tracks.values():
            t.stack = self._read(f"stack-{t.rank}.txt") or None
            if t.outcome is not None:
                continue
            code = t.exit_code
            if code == 0:
                t.outcome = "ok"
            elif t.end is not None and t.end.get("outcome") == "error":
                t.outcome = "error"
            elif code is None:
                t.outcome = "stopped"
            else:
                t.outcome = "crashed"
        outcomes = {t.outcome for t in self.tracks.values()}
        if self.fatal is not None:
            verdict = "error"
            diag = Diagnosis("rank_error", f"The ranks could not start: {self.fatal['fatal']}", [], details={
                "traceback": self.fatal.get("traceback")})
        elif self.stopped_for == "interrupted":
            verdict = "interrupted"
            diag = diagnose_timeout(self.tracks, wall)
            diag.summary = "Interrupted. " + diag.summary.replace(f"within {wall:g} s", "before the interrupt")
        elif "crashed" in outcomes:
            verdict, diag = "crash", diagnose_failure(self.tracks)
        elif "error" in outcomes:
            verdict, diag = "error", diagnose_failure(self.tracks)
        elif self.stopped_for == "hang":
            verdict, diag = "hang", diagnose_hang(self.tracks)
            diag.details["blocked_for_s"] = round(self.detect_s or 0, 3)
        elif self.stopped_for == "timeout":
            verdict, diag = "timeout", diagnose_timeout(self.tracks, self.timeout)
        else:
            verdict = "ok"
            diag = Diagnosis("none", f"All {self.n} ranks finished.", [])
        ranks = []
        for r, t in sorted(self.tracks.items()):
            value = None
            path = os.path.join(self.dir, f"result-{r}.pkl")
            if t.outcome == "ok" and os.path.exists(path):
                with open(path, "rb") as f:
                    value = f.read()
            ranks.append(RankResult.from_track(t, t.outcome, self._read(f"rank-{r}.log"), value))
        if self.fatal is not None:
            zlog = self._read("zygote.log")
            for rr in ranks:
                rr.error = {"type": "start", "message": self.fatal["fatal"]}
                rr.output = rr.output or zlog
        events = sorted((e for t in self.tracks.values() for e in t.events), key=lambda e: e.get("t", 0))
        return RunResult(verdict, self.n, wall, diag, ranks, events, None if self.owns_dir else self.dir,
                         self.proc.pid if self.proc else None, self.ended_at or time.time())

    def run(self) -> RunResult:
        t0 = time.monotonic()
        interrupted = None
        try:
            self._start()
            try:
                self._watch()
            except (KeyboardInterrupt, SystemExit) as e:
                interrupted = e
                self._stop("interrupted")
            if self.fatal is not None and self.fatal.get("usage"):
                raise UsageError(self.fatal["fatal"])
            self._reap()
            res = self._result(time.monotonic() - t0)
        finally:
            self._kill()
            if self.proc is not None and self.proc.poll() is None:
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            for tail in list(self.tails.values()) + list(self.log_tails.values()):
                tail.close()
            if self.owns_dir:
                shutil.rmtree(self.dir, ignore_errors=True)
        if interrupted is not None:
            raise Interrupted(res) from None
        return res
