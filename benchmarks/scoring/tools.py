"""One program under one tool, bounded by a wall limit, with nothing left behind.

The four tools are run the way a user runs them: `python -m sandbox.run -n W --json FILE` from the repository
root; `torchrun --standalone --nproc-per-node W FILE`; the same with TORCH_DISTRIBUTED_DEBUG=DETAIL; and the same
with the Flight Recorder on, then `torchfrtrace` on whatever dumps the job wrote (the job is the tool's "run", the
analysis is its verdict, as a user would run it after the job ended or was killed).

Why every line is timed: a tool's verdict is the moment it says something, not the moment its launcher exits
(torchrun may go on for seconds after a rank printed the error, or hang until the limit). Each line of stdout and
stderr is stamped as it arrives; the parsers see only what came before the limit (a hang counts as found only if
the tool said so before the limit), and `seconds` is the stamp of the line the parser quotes.

Why so much care to end things: torchrun starts each rank in a session of its own, and the sandbox's ranks hang
off a zygote, so killing the launcher's process group is not enough. Every descendant is recorded while the run
lasts (pid and start time, so a reused pid is never hit), and at the limit, on Ctrl-C, or when the launcher exits
leaving a rank behind, all of them get SIGTERM (the tools clean up on it), then SIGKILL after a grace period.
Each run works in a temporary directory of its own (TMPDIR points there too) that is removed afterwards.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from benchmarks.scoring import keep as kept

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = ("sandbox", "torchrun", "detail", "flight")
GRACE_S = 3.0         # between SIGTERM and SIGKILL: the sandbox and torchrun end their ranks on SIGTERM
POLL_S = 0.5          # how often a run's descendants are listed (a rank lives for seconds at least)
FRTRACE_LIMIT_S = 120  # torchfrtrace reads a few small files: far less than this, unless it hangs
PREFIX = "rank_"      # the dumps' file names: TORCH_FR_DUMP_TEMP_FILE=<dir>/rank_ gives <dir>/rank_<rank>
# variables of the caller's shell that would change what a tool does: each tool sets its own
TOOL_VARIABLES = ("TORCH_DISTRIBUTED_DEBUG", "TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE",
                  "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_TRACE_BUFFER_SIZE")
DESCRIBE = {
    "sandbox": "python -m sandbox.run -n W --json FILE",
    "torchrun": "torchrun --standalone --nproc-per-node W FILE",
    "detail": "TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --standalone --nproc-per-node W FILE",
    "flight": "TORCH_FR_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE=DIR/rank_ [TORCH_NCCL_DUMP_ON_TIMEOUT=1 on NCCL] "
              "torchrun --standalone --nproc-per-node W FILE; then torchfrtrace DIR --prefix rank_ "
              "(again with --allow-incomplete-ranks when it says dumps are missing)",
}
STOP = threading.Event()  # set on Ctrl-C: every run in flight ends its processes and returns


def launcher(name: str, module: str) -> list[str]:
    """The venv's console script next to this Python (`torchrun`, `torchfrtrace`), or `python -m` its module."""
    script = os.path.join(os.path.dirname(sys.executable), name)
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", module]


@dataclass(kw_only=True)
class Captured:
    """One process's run: its exit code (None when it was ended at the limit or by Ctrl-C) and its output."""
    cmd: list
    exit_code: int | None
    wall_s: float
    cut_s: float | None = None   # when it was told to end; lines after this are not the tool's verdict
    lines: list = field(default_factory=list)  # (seconds since start, "out"|"err", text), in arrival order

    def text(self, stream: str | None = None, in_time: bool = True) -> str:
        late = self.cut_s if in_time and self.cut_s is not None else float("inf")
        return "".join(t for s, w, t in self.lines if (stream is None or w == stream) and s <= late)

    def at(self, line: str) -> float | None:
        """When `line` (as a parser quotes it) was printed."""
        for s, _, t in self.lines:
            if line and line.strip() in t:
                return round(s, 3)
        return None


def _stat(pid: str) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of a live process, from /proc; None once it has ended (a zombie
    has ended: it only waits for its parent to read its exit code)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return None if rest[0] == "Z" else (int(rest[1]), int(rest[19]))
    except (OSError, IndexError, ValueError):  # it ended while we looked: not ours to track any more
        return None


def _table() -> dict[int, tuple[int, int]]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (s := _stat(name)) is not None:
            out[int(name)] = s
    return out


def _children(pid: int) -> list[int] | None:
    """The children of `pid`, from each of its threads' /proc children file (cheap); None where the kernel has no
    such file (some sandboxed kernels), [] when the process is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:  # it ended: no children to follow
        return []
    out = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended while we looked
            return None
        except OSError:  # the thread ended while we read it
            continue
    return out


def _descendants(root: int, known: dict[int, int]) -> None:
    """Add every live descendant of `root` to `known` (pid -> start time)."""
    todo, table = [root], None
    while todo:
        pid = todo.pop()
        kids = _children(pid)
        if kids is None:  # no children files here: read every process's parent instead
            table = table or _table()
            kids = [c for c, (ppid, _) in table.items() if ppid == pid]
        for c in kids:
            if (s := _stat(str(c))) is not None:
                known.setdefault(c, s[1])
                todo.append(c)


def _signal_all(known: dict[int, int], sig: int) -> bool:
    """Send `sig` to each recorded process still alive (same pid, same start time) and to its process group;
    True while any was alive."""
    alive = False
    mine = os.getpgrp()
    for pid, start in known.items():
        s = _stat(str(pid))
        if s is None or s[1] != start:
            continue
        alive = True
        try:
            group = os.getpgid(pid)
            if group != mine:  # never our own group: that would end the scoreboard
                os.killpg(group, sig)
            os.kill(pid, sig)
        except ProcessLookupError:  # it ended between the check and the signal: what we wanted
            pass
    return alive


def _end(known: dict[int, int], proc: subprocess.Popen | None) -> None:
    if not _signal_all(known, signal.SIGTERM):
        return
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is None:
            time.sleep(0.05)
            continue
        if not _signal_all(known, 0):
            return
        time.sleep(0.05)
    _signal_all(known, signal.SIGKILL)


def capture(cmd: list, *, env: dict, cwd: str, limit: float) -> Captured:
    """Run `cmd` in a session of its own, stamp each output line, end it and all it started at `limit` seconds."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=cwd, start_new_session=True)
    got = Captured(cmd=list(cmd), exit_code=None, wall_s=0.0)
    lock = threading.Lock()

    def read(pipe, which):
        for raw in iter(pipe.readline, b""):
            with lock:
                got.lines.append((time.monotonic() - t0, which, raw.decode("utf-8", "replace")))
        pipe.close()

    readers = [threading.Thread(target=read, args=(proc.stdout, "out"), daemon=True),
               threading.Thread(target=read, args=(proc.stderr, "err"), daemon=True)]
    for r in readers:
        r.start()
    known = {proc.pid: (_stat(str(proc.pid)) or (0, 0))[1]}
    try:
        while True:
            try:
                got.exit_code = proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                _descendants(proc.pid, known)
            if time.monotonic() - t0 > limit or STOP.is_set():
                got.cut_s = time.monotonic() - t0
                _end(known, proc)
                proc.wait(timeout=GRACE_S + 5)  # SIGKILL was sent: it is going
                break
    finally:
        got.wall_s = round((got.cut_s if got.cut_s is not None else time.monotonic() - t0), 3)
        _end(known, None)  # a rank the launcher left behind (or everything, if we got here by an exception)
        for r in readers:
            r.join(timeout=5)
    return got


@dataclass(kw_only=True)
class ToolRun:
    tool: str
    main: Captured                 # sandbox.run or torchrun
    frtrace: list = field(default_factory=list)   # flight: torchfrtrace's runs (the last is the verdict)
    dumps: list = field(default_factory=list)     # flight: the dump files the job left

    @property
    def outcome(self) -> str:
        return "limit" if self.main.exit_code is None else f"exit {self.main.exit_code}"


def _env(tool: str, tmp: str, gpu: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in TOOL_VARIABLES}
    env.update(TMPDIR=tmp, PYTHONUNBUFFERED="1")  # unbuffered: each line is stamped when the rank says it
    if not gpu:  # the programs take NCCL whenever CUDA is there: a gloo run hides the GPUs of a GPU machine
        env["CUDA_VISIBLE_DEVICES"] = ""
    if tool == "sandbox":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    elif tool == "detail":
        env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    elif tool == "flight":
        env.update(TORCH_FR_BUFFER_SIZE="2000", TORCH_FR_DUMP_TEMP_FILE=os.path.join(tmp, "dumps", PREFIX))
        if gpu:
            env["TORCH_NCCL_DUMP_ON_TIMEOUT"] = "1"
    return env


def run(tool: str, file: str, *, world: int, limit: float, gpu: bool = False, keep: str | None = None) -> ToolRun:
    """`file` under `tool` with `world` ranks; with `keep`, every raw output is copied into that folder."""
    tmp = tempfile.mkdtemp(prefix="scoreboard-")
    try:
        env = _env(tool, tmp, gpu)
        if tool == "sandbox":
            cmd = [sys.executable, "-m", "sandbox.run", "-n", str(world), "--json", file] + (["--gpu"] if gpu else [])
            cwd = ROOT
        else:
            cmd = launcher("torchrun", "torch.distributed.run") + ["--standalone", "--nproc-per-node", str(world), file]
            cwd = os.path.join(tmp, "cwd")  # whatever the program writes in its working directory goes with tmp
            os.makedirs(cwd)
        os.makedirs(os.path.join(tmp, "dumps"))
        out = ToolRun(tool=tool, main=capture(cmd, env=env, cwd=cwd, limit=limit))
        if tool == "flight":
            _analyse(out, os.path.join(tmp, "dumps"), env)
        if keep:
            kept.save(out, keep, os.path.join(tmp, "dumps"))
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # ignore: a file a dying rank writes as we remove is gone with it


def _analyse(out: ToolRun, dumps: str, env: dict) -> None:
    """torchfrtrace on the job's dumps, once more with --allow-incomplete-ranks when it refuses missing ranks."""
    out.dumps = sorted(f for f in os.listdir(dumps) if f.startswith(PREFIX))
    if not out.dumps or STOP.is_set():
        return
    cmd = launcher("torchfrtrace", "torch.distributed.flight_recorder.fr_trace") + [dumps, "--prefix", PREFIX]
    out.frtrace.append(capture(cmd, env=env, cwd=os.path.dirname(dumps), limit=FRTRACE_LIMIT_S))
    if "Missing dump files from ranks" in out.frtrace[-1].text() and not STOP.is_set():
        out.frtrace.append(capture(cmd + ["--allow-incomplete-ranks"], env=env, cwd=os.path.dirname(dumps),
                                   limit=FRTRACE_LIMIT_S))
