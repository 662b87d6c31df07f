"""The zygote: one process that imports torch once, then forks every rank of a run from that warm state.

It is started by `sandbox.launch` with its own session (so the whole run is one process group the parent can end
with one signal), reads the run's spec from the file named by SANDBOX_SPEC (then deletes it), forks the ranks,
hosts the rendezvous store on a socket bound to 127.0.0.1 (like torchrun's agent store), and reports each rank's
pid and exit status on stdout as JSON lines. A rank that fails before its user code runs exits with code 70, its
traceback in its log (or in the zygote's stderr, `zygote.log`, if the log could not be opened).
If the parent dies, the kernel sends the zygote SIGTERM (PR_SET_PDEATHSIG); it then ends its ranks and removes
the run's directory, so nothing is left behind. Ranks die with the zygote the same way.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import socket
import sys

from sandbox._proc import EARLY_EXIT, die_with_parent, report_failure

PROTO_FD = 1  # the pipe to the parent; moved off fd 1 in main() so stray prints cannot corrupt it


def say(**msg) -> None:
    os.write(PROTO_FD, (json.dumps(msg) + "\n").encode())


def main() -> None:
    global PROTO_FD
    PROTO_FD = os.dup(1)
    os.dup2(2, 1)  # whatever torch or the user's module prints at import goes to the zygote's log
    parent = int(os.environ.get("SANDBOX_PARENT_PID", os.getppid()))
    run_dir = os.environ.get("SANDBOX_RUN_DIR")

    def orphaned(signum, frame):  # the parent is gone: clean up after it, then end the whole process group
        if run_dir and os.environ.get("SANDBOX_OWNS_DIR") == "1":
            shutil.rmtree(run_dir, ignore_errors=True)
        os.killpg(0, signal.SIGKILL)

    signal.signal(signal.SIGTERM, orphaned)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(signal.SIGTERM, parent)

    import torch  # noqa: F401  the one import of torch that every rank shares
    import torch.distributed  # noqa: F401

    from sandbox import rank as rank_mod
    from sandbox import trace

    trace.install()
    with open(os.environ["SANDBOX_SPEC"], "rb") as f:
        spec = pickle.load(f)
    os.unlink(os.environ["SANDBOX_SPEC"])
    sys.path[:] = spec.get("sys_path", []) + [p for p in sys.path if p not in spec.get("sys_path", [])]
    info = {"ready": True, "pid": os.getpid(), "torch": torch.__version__}
    if spec.get("gpu"):
        info["gpus"] = torch.cuda.device_count()  # NVML-based (PYTORCH_NVML_BASED_CUDA_CHECK): no CUDA init before fork
        if info["gpus"] < spec["world_size"]:
            say(fatal=f"--gpu needs one GPU per rank: {spec['world_size']} ranks, {info['gpus']} GPU(s) visible.",
                usage=True)
            return
    try:
        rank_mod.prepare(spec)  # import the user's module once, before the fork, so ranks share it
    except BaseException as e:  # noqa: BLE001  reported to the parent as the run's failure
        import traceback
        say(fatal=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-6000:])
        return
    say(**info)

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))  # the OS picks the port: concurrent runs never collide
    listener.listen(1024)
    port = listener.getsockname()[1]
    sys.stdout.flush()
    sys.stderr.flush()
    pids = {}
    me = os.getpid()
    for r in range(spec["world_size"]):
        pid = os.fork()
        if pid == 0:
            try:
                listener.close()
                os.close(PROTO_FD)
                rank_mod.main(spec, r, port, zygote=me)  # ends the process itself once the user's code has run
            except BaseException:  # noqa: BLE001  the rank could not set itself up (log, stack file, tracer): say why
                # fd 2 is the rank's log if it could be opened (the launcher shows it as the rank's output), else
                # the zygote's stderr, zygote.log in the run directory
                report_failure(f"rank {r} failed outside its own code (exit code {EARLY_EXIT}):")
            finally:
                os._exit(EARLY_EXIT)  # never unwind into the zygote's code
        pids[pid] = r
        say(rank=r, pid=pid)
    store = torch.distributed.TCPStore("127.0.0.1", port, spec["world_size"], True, wait_for_workers=False,
                                       master_listen_fd=listener.fileno(), use_libuv=True)
    while pids:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        r = pids.pop(pid, None)
        if r is not None:
            say(exit=r, code=os.waitstatus_to_exitcode(status))
    del store
    say(done=True)


if __name__ == "__main__":
    main()
    os._exit(0)
