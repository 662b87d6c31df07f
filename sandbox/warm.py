"""The zygote of a run, from the launcher's side: a cold one (a new process that imports torch, for one run) or a
run forked by the warm zygote of this process (torch already imported: a run costs a fork).

A warm zygote is started on the first warm run of a process (a Jupyter kernel uses one by default), and serves
every later run of it; `shutdown()` ends it, and so does the end of the process (atexit, and PR_SET_PDEATHSIG if
the process is killed). Its protocol is in `sandbox._zygote.serve`.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from sandbox import defaults

log = logging.getLogger("sandbox.warm")

START_WAIT_S = 120.0  # the first warm run waits for the warm zygote to import torch (seconds, bounded)
SHARE_ENV = "SANDBOX_WARM_SOCKET"  # another process's shared warm zygote (`share`), asked instead of starting ours


class Handle:
    """A run's zygote: its pid (the leader of the run's process group) and the fd of its pipe to us."""

    def __init__(self, pid: int, fd: int, closer, poller):
        self.pid, self.fd = pid, fd
        self._close, self._poll = closer, poller

    def poll(self) -> int | None:
        """None while the zygote runs, else its exit status (0 when not ours to know)."""
        return self._poll()

    def wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("zygote", timeout)
            time.sleep(0.01)

    def close(self) -> None:
        self._close()


def cold(env: dict, log_path: str) -> Handle:
    """A new zygote process for one run (it imports torch itself)."""
    with open(log_path, "wb") as err:
        p = subprocess.Popen([sys.executable, "-m", "sandbox._zygote"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=err, start_new_session=True, env=env, close_fds=True)
    return Handle(p.pid, p.stdout.fileno(), p.stdout.close, p.poll)


_keeper: tuple | None = None  # (thread, queue of (function, future)) that starts the warm zygote off the main thread
_keeper_lock = threading.Lock()


def _from_a_lasting_thread(start):
    """`start()` run in a thread that lasts as long as this process, and its result. The warm zygote dies with its
    parent by PR_SET_PDEATHSIG, which Linux sends when the *thread* that started it ends, not the process: a warm
    zygote started by a worker thread of a pool (a launch() from a thread) died with that thread, and the next
    warm run found its socket reset. The main thread lasts; any other hands the start to a thread that does."""
    global _keeper
    if threading.current_thread() is threading.main_thread():
        return start()
    import concurrent.futures
    import queue

    with _keeper_lock:
        if _keeper is None or not _keeper[0].is_alive():
            todo: queue.SimpleQueue = queue.SimpleQueue()

            def serve():
                while True:
                    fn, fut = todo.get()
                    try:
                        fut.set_result(fn())
                    except BaseException as e:  # noqa: BLE001  the caller raises it
                        fut.set_exception(e)

            t = threading.Thread(target=serve, name="sandbox-warm-keeper", daemon=True)
            t.start()
            _keeper = (t, todo)
    fut: concurrent.futures.Future = concurrent.futures.Future()
    _keeper[1].put((start, fut))
    return fut.result(timeout=START_WAIT_S)


class _Warm:
    """The warm zygote of this process, and the socket its runs are asked for on."""

    def __init__(self, env: dict):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # one request, one message
        env = dict(env, SANDBOX_CONTROL_FD=str(theirs.fileno()), SANDBOX_PARENT_PID=str(os.getpid()))
        # its sibling zygotes, one per further hash seed, serve every later run whatever its number of ranks
        env[defaults.HASH_SEEDS_ENV] = str(defaults.hash_seeds({**os.environ, "PYTHONHASHSEED": env.get(
            "PYTHONHASHSEED", "")}))  # this process's choice, not the first run's number (one rank: one seed)
        self.proc = _from_a_lasting_thread(lambda: subprocess.Popen(
            [sys.executable, "-m", "sandbox._zygote", "--warm"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True, env=env, pass_fds=(theirs.fileno(),)))
        theirs.close()
        self.sock, self.buf, self.shared = ours, b"", None
        log.info("warm zygote started (pid %d)", self.proc.pid)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork_run(self, spec_path: str, environ: dict, log_path: str, interrupted, preload: bool = False,
                 libraries: list | tuple = ()) -> Handle:
        """Ask for one run; returns once the warm zygote forked it (the first time, once it has imported torch).
        `interrupted()` is polled meanwhile: if it turns true the warm zygote is ended (and KeyboardInterrupt
        raised), since whatever it was about to fork must not start. `preload`: the run's code needs the preload
        (`sandbox.preload.needed`); from then on the warm zygote imports it when idle, for the runs after, and so
        the `libraries` the run's code imports (`sandbox.preload.libraries`)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        req = {"spec": spec_path, "cwd": os.getcwd(), "environ": environ, "log": log_path, "preload": preload,
               "libraries": list(libraries), "launcher": os.getpid()}
        try:
            socket.send_fds(self.sock, [json.dumps(req).encode()], [theirs.fileno()])
        finally:
            theirs.close()
        deadline = time.monotonic() + START_WAIT_S
        self.sock.settimeout(0.05)
        try:
            while b"\n" not in self.buf:
                if interrupted():
                    ours.close()
                    raise KeyboardInterrupt
                if time.monotonic() > deadline or not self.alive():
                    ours.close()
                    raise RuntimeError("the warm zygote did not answer")
                try:
                    chunk = self.sock.recv(4096)
                except socket.timeout:
                    continue
                if not chunk:
                    ours.close()
                    raise RuntimeError("the warm zygote closed its socket")
                self.buf += chunk
        finally:
            self.sock.settimeout(None)
        pid = self._answer()

        def poll():
            try:
                os.kill(pid, 0)  # the warm zygote's runs are reaped by the kernel: gone means ended
            except ProcessLookupError:
                return 0
            return None

        return Handle(pid, ours.fileno(), ours.close, poll)

    def _answer(self) -> int:
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)["pid"]

    def share(self) -> str:
        """A socket path on which other processes' launchers (SHARE_ENV) ask this warm zygote for their runs."""
        if self.shared is None:
            folder = tempfile.mkdtemp(prefix="sandbox-warm-")
            path = os.path.join(folder, "zygote")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            listener.bind(path)
            listener.listen(64)
            try:
                socket.send_fds(self.sock, [json.dumps({"share": True}).encode()], [listener.fileno()])
                self.sock.settimeout(START_WAIT_S)
                while b"\n" not in self.buf:
                    chunk = self.sock.recv(4096)
                    if not chunk:
                        raise RuntimeError("the warm zygote closed its socket")
                    self.buf += chunk
                self._answer()
            finally:
                self.sock.settimeout(None)
                listener.close()
            self.shared = path
        return self.shared

    def close(self) -> None:
        """End the warm zygote and every run it started (closing its socket tells it; SIGKILL makes sure)."""
        try:
            self.sock.close()
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:  # it did not notice in time: end its whole group
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # already gone
            pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:  # SIGKILL cannot be refused; nothing more to do
            pass
        if self.shared:
            shutil.rmtree(os.path.dirname(self.shared), ignore_errors=True)
        log.info("warm zygote %d ended", self.proc.pid)


class _Shared(_Warm):
    """Another process's warm zygote (`share`), asked over the socket at `path`: its runs end with this process
    (they watch their launcher), and closing the connection leaves that zygote to its owner."""

    def __init__(self, path: str):
        self.sock, self.buf, self.shared = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET), b"", None
        self.sock.connect(path)
        self.proc = None
        log.info("runs fork from the warm zygote at %s", path)

    def alive(self) -> bool:
        try:
            readable = select.select([self.sock], [], [], 0)[0]
            return not readable or self.sock.recv(4096, socket.MSG_PEEK) != b""
        except OSError:  # closed on our side, or broken
            return False

    def close(self) -> None:
        self.sock.close()


_lock = threading.Lock()
_warm: _Warm | None = None


def fork_run(env: dict, spec_path: str, log_path: str, interrupted, preload: bool = False,
             libraries: list | tuple = ()) -> Handle:
    """A run forked by this process's warm zygote (started now if there is none, or if it died); `preload`: its
    code needs the preload, `libraries`: the ones it imports (see `_Warm.fork_run`)."""
    global _warm
    with _lock:
        _live(env, connect=True)
        try:
            return _warm.fork_run(spec_path, env, log_path, interrupted, preload, libraries)
        except BaseException:
            _warm.close()  # interrupted while it was starting, or broken: nothing of it may stay
            _warm = None
            raise


def _live(env: dict, connect: bool) -> _Warm:
    """With _lock held: the warm zygote of this process, a dead one dropped; started now with `env` if there is none
    (`connect`: first another process's that SHARE_ENV names)."""
    global _warm
    if _warm is not None and not _warm.alive():
        _warm.close()
        _warm = None
    if _warm is None:
        _warm = (_connected() if connect else None) or _Warm(env)
    return _warm


def _connected() -> _Shared | None:
    """Another process's warm zygote, where SHARE_ENV names one that still answers; else None (start our own)."""
    path = os.environ.get(SHARE_ENV)
    if not path:
        return None
    try:
        return _Shared(path)
    except OSError as e:  # its owner has ended it: ours is started instead
        log.info("the warm zygote at %s is gone (%s)", path, e)
        return None


def share(env: dict) -> str:
    """This process's warm zygote shared (started now with `env`, as by a run's launcher, if there is none): the
    socket path to give other processes in SHARE_ENV (the test suite's kernels: their runs then cost a fork, not a
    start of their own zygote). Ours only: one we share ourselves is not passed on."""
    with _lock:
        if _live(env, connect=False).proc is None:
            raise RuntimeError("this process asks another's warm zygote for its runs: it has none to share")
        return _warm.share()


def running() -> int | None:
    """The warm zygote's pid (ours, not another process's we share), or None."""
    return _warm.proc.pid if _warm is not None and _warm.proc is not None and _warm.alive() else None


def shutdown() -> None:
    """End this process's warm zygote, if there is one (the next warm run starts a new one)."""
    global _warm
    with _lock:
        if _warm is not None:
            _warm.close()
            _warm = None


def default() -> bool:
    """Warm by default inside a Jupyter kernel (many runs, one process), cold elsewhere; SANDBOX_WARM=1/0 decides."""
    env = os.environ.get("SANDBOX_WARM")
    if env is not None:
        return env not in ("0", "", "no", "false")
    ipython = sys.modules.get("IPython")  # imported by a kernel; importing jupyter_client alone does not make one
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return getattr(shell, "kernel", None) is not None


atexit.register(shutdown)
