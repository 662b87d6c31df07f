"""docs/kernel_zygote.py: a lab's kernel forked from a server that has imported torch, as Jupyter's kernel manager
starts, interrupts and ends any kernel: the kernel sees the stand-in's working directory and environment, an
interrupt reaches the cell that runs, a shutdown ends it, a stand-in killed outright takes its kernel with it, and a
stand-in whose environment changes what an interpreter imports (or that finds no server) is a plain kernel."""
import contextlib
import os
import signal
import subprocess
import sys
import tempfile

import pytest
from conftest import KERNEL_PACKAGES, ROOT, docs_module, gone, need, wait_for

kz = docs_module("kernel_zygote")
labs_run = docs_module("labs_run")


@pytest.fixture
def server(tmp_path):
    """A kernel server of this test's own (ended after it) and the JUPYTER_PATH folder of its kernelspec."""
    need(*KERNEL_PACKAGES)
    sock = str(tmp_path / "server.sock")
    p = subprocess.Popen([sys.executable, kz.__file__, "serve", sock, str(os.getpid())], cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT), stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield p, kz.kernelspec(str(tmp_path / "jupyter"), sock, "forked")
    finally:
        p.kill()
        p.wait(timeout=30)


@contextlib.contextmanager
def started(jupyter: str, env: dict):
    from jupyter_client import KernelManager
    from jupyter_client.kernelspec import KernelSpecManager

    with tempfile.TemporaryDirectory(prefix="sandbox-kernel-") as folder:
        km = KernelManager(kernel_name="forked", kernel_spec_manager=KernelSpecManager(
            kernel_dirs=[os.path.join(jupyter, "kernels")]), **labs_run.over_unix_sockets(folder))
        km.start_kernel(env=env, cwd=folder)
        kc = km.client()
        try:
            kc.start_channels()
            kc.wait_for_ready(timeout=60)
            yield km, kc, folder
        finally:
            kc.stop_channels()
            if km.has_kernel:
                km.shutdown_kernel(now=True)


def said(kc, code: str, timeout: float = 60) -> tuple[str, dict]:
    out = []
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=out.append)
    text = "".join(m["content"].get("text", "") for m in out if m["msg_type"] == "stream")
    return text, reply["content"]


ASK = "import os, sys; print(os.getpid(), os.getppid(), os.getcwd(), os.environ.get('MARK'), 'torch' in sys.modules)"


def test_a_forked_kernel_runs_as_asked_is_interrupted_and_ends(clean, server):
    p, jupyter = server
    env = dict(os.environ, PYTHONPATH=ROOT, MARK="mine")
    with started(jupyter, env) as (km, kc, folder):
        text, _ = said(kc, ASK)
        pid, ppid, cwd, mark, warm = text.split()
        assert int(ppid) == p.pid and int(pid) != km.provisioner.process.pid  # forked by the server
        assert (cwd, mark, warm) == (os.path.realpath(folder), "mine", "True")  # torch came with the fork
        # stop_on_error=False: else the cell's KeyboardInterrupt makes ipykernel abort the execute requests that reach
        # it before its own "stop aborting" message, and under load the next one can (its reply says "aborted")
        msg = kc.execute("import time; print('sleeping', flush=True); time.sleep(60)", stop_on_error=False)
        wait_for(lambda: _printed(kc, msg), "the cell to start sleeping", timeout=30)
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=30)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
        text, content = said(kc, "print(6 * 7)")
        assert (text, content["status"]) == ("42\n", "ok"), content  # the kernel goes on after an interrupt
        km.shutdown_kernel()
        assert km.provisioner is None or km.provisioner.process is None or km.provisioner.process.poll() == 0
        assert wait_for(lambda: gone(int(pid)), "the kernel to end", timeout=30)


def _printed(kc, msg_id: str) -> bool:
    """Has the cell of `msg_id` printed yet (it is running its code, past the kernel's own steps before it)?"""
    while True:
        try:
            m = kc.get_iopub_msg(timeout=0.05)
        except Exception:  # queue.Empty: nothing more yet
            return False
        if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "stream":
            return True


def test_a_stand_in_killed_outright_takes_its_kernel(clean, server):
    _, jupyter = server
    with started(jupyter, dict(os.environ, PYTHONPATH=ROOT)) as (km, kc, _):
        pid = int(said(kc, ASK)[0].split()[0])
        os.kill(km.provisioner.process.pid, signal.SIGKILL)
        # a kernel asked for meanwhile, while the killed one may not be reaped yet, is forked and runs as well
        with started(jupyter, dict(os.environ, PYTHONPATH=ROOT)) as (_, kc2, _):
            assert said(kc2, "print(6 * 7)")[0] == "42\n"
        assert wait_for(lambda: gone(pid), "the kernel to end with its stand-in", timeout=30)


@pytest.mark.parametrize("how", ["another PYTHONPATH", "no server"])
def test_otherwise_the_stand_in_is_a_plain_kernel(clean, server, how, tmp_path):
    p, jupyter = server
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + str(tmp_path))
    if how == "no server":
        env["PYTHONPATH"] = ROOT
        p.kill()  # its socket, if it had bound it yet, refuses: the stand-in tries for CONNECT_WAIT_S, then goes on
        p.wait(timeout=30)
    with started(jupyter, env) as (km, kc, _):
        pid, ppid, *_ = said(kc, ASK)[0].split()
        assert int(pid) == km.provisioner.process.pid  # the stand-in became the kernel (exec, same pid)
