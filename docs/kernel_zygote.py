"""Lab kernels forked from one process that has already imported what every lab imports (torch and the sandbox):
a lab's kernel then costs a fork, not an interpreter start that imports torch (about 2.5 s of CPU a lab on 2 cores;
ipykernel itself, a quarter of a second, each kernel imports). A test session starts one such server per worker
(tests/conftest.py) for the labs it executes.

    python docs/kernel_zygote.py serve SOCKET            the server: imports, then forks a kernel per request
    python docs/kernel_zygote.py kernel SOCKET -f FILE   the stand-in, a kernelspec's argv (`kernelspec`)

Jupyter's kernel manager starts the stand-in as if it were the kernel. The stand-in hands the server its stdin,
stdout and stderr, its working directory and its environment; the server forks a kernel with them (a real
ipykernel, `ipykernel_launcher -f FILE`), and the stand-in relays every signal the manager sends (interrupt,
terminate) to it and exits with its exit status. A stand-in that is killed outright takes its kernel with it (the
server kills a kernel whose stand-in hung up), and a server that dies takes its kernels (PR_SET_PDEATHSIG).
Where no server answers, or the environment differs in what decides imports (PYTHONPATH, the hash seed), the
stand-in becomes a plain kernel: `python -m ipykernel_launcher`, as the usual kernelspec starts it.

Only the standard library in the stand-in: it is one interpreter start per lab, meant to be short. The server and
its kernels use the sandbox's own process helpers.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys

# what an interpreter reads at its start and a fork cannot change: a kernel that asks for other values is a plain one
IMPORTS_ENV = ("PYTHONPATH", "PYTHONHASHSEED", "PYTHONSAFEPATH", "PYTHONNOUSERSITE", "PYTHONHOME", "PYTHONPLATLIBDIR")
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
# imported before the forks; not ipykernel nor IPython: they read the environment into class defaults at import (the
# kernel manager's JPY_PARENT_PID among them), so each kernel imports them itself, in its own environment
WARM = ("torch", "torch.distributed", "sandbox", "sandbox.lab")
CONNECT_WAIT_S = 2.0  # a server still binding its socket: how long the stand-in tries before it starts a plain one


def kernelspec(folder: str, sock: str, name: str) -> str:
    """A kernelspec named `name` in `folder`/kernels whose kernels are forked by the server at `sock`."""
    spec = os.path.join(folder, "kernels", name)
    os.makedirs(spec, exist_ok=True)
    with open(os.path.join(spec, "kernel.json"), "w") as f:
        json.dump({"argv": [sys.executable, os.path.abspath(__file__), "kernel", sock, "-f", "{connection_file}"],
                   "display_name": "dist-sandbox labs (forked)", "language": "python"}, f)
    return folder


def _plain(argv: list[str], why: str) -> None:
    """Become a plain kernel, saying `why` this one is not forked on its stderr (exec: same pid, so the kernel
    manager's view stays true)."""
    os.write(2, f"kernel_zygote: a plain kernel: {why}\n".encode())
    os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *argv])


def stand_in(sock_path: str, argv: list[str]) -> int:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for _ in range(int(CONNECT_WAIT_S / 0.05)):
        try:
            sock.connect(sock_path)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            select.select([], [], [], 0.05)
    else:
        _plain(argv, "no server")
    ask = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(sock, [json.dumps(ask).encode() + b"\n"], [0, 1, 2])
    reply = json.loads(_line(sock) or b'{"plain": "the server hung up"}')
    if "plain" in reply:
        sock.close()
        _plain(argv, reply["plain"])
    pid = reply["pid"]

    def relay(signum, frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:  # it ended: its status is on the way
            pass
    for s in RELAYED:
        signal.signal(s, relay)
    status = json.loads(_line(sock) or b'{"exit": 1}')["exit"]
    return status if status >= 0 else 128 - status  # killed by signal N: as a shell reports it


def _line(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        try:
            got = sock.recv(65536)
        except InterruptedError:  # a relayed signal; the wait goes on
            continue
        if not got:
            return b""
        data += got
    return data


def serve(sock_path: str, parent: int) -> None:
    from sandbox._proc import die_with_parent

    die_with_parent(signal.SIGKILL, parent)  # end with whoever started us
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(16)  # bound before the imports: a stand-in that comes early waits in the backlog
    import importlib

    for m in WARM:
        importlib.import_module(m)
    mine = {k: os.environ.get(k) for k in IMPORTS_ENV}
    kernels: dict[int, socket.socket] = {}  # pid -> its stand-in's connection
    while True:
        ready = select.select([listener, *(c for c in kernels.values() if c is not None)], [], [], 0.1)[0]
        for s in ready:
            if s is listener:
                conn = listener.accept()[0]
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                while not msg.endswith(b"\n"):
                    msg += conn.recv(1 << 20)
                ask = json.loads(msg)
                differs = [k for k in IMPORTS_ENV if ask["env"].get(k) != mine[k]]
                if differs:
                    conn.sendall(json.dumps({"plain": f"{', '.join(differs)} differ"}).encode() + b"\n")
                    conn.close()
                else:
                    pid = os.fork()
                    if pid == 0:
                        listener.close()
                        for c in kernels.values():
                            if c is not None:  # None: a kernel killed, not reaped yet
                                c.close()
                        conn.close()
                        _kernel(ask, fds, os.getppid())
                    kernels[pid] = conn
                    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                for fd in fds:
                    os.close(fd)
            else:  # a stand-in hung up before its kernel ended: it was killed, and its kernel goes with it
                pid = next(p for p, c in kernels.items() if c is s)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                s.close()
                kernels[pid] = None  # its exit is still to be reaped
        for pid in list(kernels):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                conn = kernels.pop(pid)
                if conn is not None:
                    code = os.waitstatus_to_exitcode(status)
                    try:
                        conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
                    except OSError:  # the stand-in is gone already
                        pass
                    conn.close()
        if os.getppid() != parent:
            os._exit(0)


def _kernel(ask: dict, fds: list[int], server: int) -> None:
    """In the forked child: become the kernel the stand-in asked for, with its stdio, cwd and environment."""
    import atexit

    from sandbox._proc import die_with_parent

    code = 1
    try:
        die_with_parent(signal.SIGKILL, server)  # the server's end is ours
        for s in RELAYED + (signal.SIGCHLD,):
            signal.signal(s, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
            os.close(fd)
        os.chdir(ask["cwd"])
        os.environ.clear()
        os.environ.update(ask["env"])
        sys.path[0] = os.getcwd()  # as `python -m ipykernel_launcher` puts it
        sys.argv = [sys.argv[0], *ask["argv"]]
        from ipykernel import kernelapp

        kernelapp.launch_new_instance()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1:2] == ["kernel"]:
        sys.exit(stand_in(sys.argv[2], sys.argv[3:]))
    else:
        sys.exit("usage: kernel_zygote.py serve SOCKET PARENT_PID | kernel SOCKET -f CONNECTION_FILE")
