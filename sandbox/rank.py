"""What runs first inside every rank, right after the zygote forks it.

It gives the rank the environment torchrun would (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...),
sends its stdout/stderr to its own log file, arms a stack dump on SIGUSR1 (faulthandler works even while the rank
is blocked inside gloo), starts the tracer, runs the target (a function, a script or a module), records how it
ended, and exits without ever returning into the zygote's code.
"""
from __future__ import annotations

import datetime
import faulthandler
import importlib
import importlib.util
import os
import pickle
import runpy
import signal
import sys

from sandbox import _paths, ending, rundir, topology, trace
from sandbox._proc import die_with_parent
from sandbox.topology import Topology
from sandbox.trace import perturb, recorder

_prepared: dict = {}
# the script whose __main__ is being imported (in the zygote) to find the function the ranks run: its top-level code
# runs then, and a launch it makes there, without `if __name__ == "__main__":`, would start runs within runs
IMPORTING_MAIN: list[str] = []


class TopLevelLaunch(Exception):
    """A run started by the top-level code of a script that is being imported to find a rank's function (raised by
    sandbox._run.lifecycle; the zygote hands its sentence to the launcher, which raises it as the user's mistake)."""


def _resolve(target: dict):
    """The function named by a func target; a function of a script's __main__ is loaded from its file."""
    if target["module"] == "__main__":
        path = target["path"]
        mod = sys.modules.get("__sandbox_main__")
        if mod is None:
            spec = importlib.util.spec_from_file_location("__sandbox_main__", path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules["__sandbox_main__"] = mod
            IMPORTING_MAIN.append(path)  # a run its top level starts now is refused (sandbox._run.lifecycle)
            try:
                spec.loader.exec_module(mod)  # its `if __name__ == "__main__"` block does not run
            finally:
                IMPORTING_MAIN.pop()
            sys.modules["__main__"] = mod  # so arguments pickled as __main__.Cfg find their class
    else:
        mod = importlib.import_module(target["module"])
    obj = mod
    for part in target["qualname"].split("."):
        obj = getattr(obj, part)
    return obj


def prepare(spec: dict) -> None:
    """In the zygote, before the fork: import what every rank will need (once, shared by all ranks)."""
    for name in spec.get("preload", ()):
        importlib.import_module(name)
    target = spec["target"]
    _paths.name_dynamic_code(target.get("code_file"))
    if target["kind"] == "func":
        if target.get("path"):
            sys.path.insert(0, os.path.dirname(target["path"]))
        # a function typed into a notebook cell (or a lambda, or a closure) comes by value (cloudpickle's bytes,
        # which plain pickle reads); an importable one by name
        _prepared["fn"] = pickle.loads(target["fn_bytes"]) if "fn_bytes" in target else _resolve(target)
        _prepared["args"], _prepared["kwargs"] = pickle.loads(target["payload"])


def torchrun_env(rank: int, world_size: int, port: int, run_id: str, *, nodes: Topology | None = None,
                 master_addr: str = "127.0.0.1") -> dict[str, str]:
    """The variables torchrun gives each worker: of a single-node job by default; on simulated `nodes` of a job
    whose ranks fill them as the run's topology says (ranks 0..P-1 on node 0), with its master on `master_addr`
    (node 0's hostname), and NODE_RANK too: the node's index as `torchrun --node-rank` was given it, which
    multi-node scripts read (a one-node job's environment stays torchrun's own)."""
    topo = nodes or topology.single(world_size)
    node, local, per = topo.group_rank(rank), topo.local_rank(rank), topo.per_node
    return ({"NODE_RANK": str(node)} if nodes is not None else {}) | {
        "RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(per), "GROUP_RANK": str(node), "GROUP_WORLD_SIZE": str(topo.nnodes),
        "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(world_size), "ROLE_NAME": "default",
        "MASTER_ADDR": master_addr, "MASTER_PORT": str(port),
        "TORCHELASTIC_RUN_ID": run_id, "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
        # like torchrun's agent: the store is already hosted (by the zygote), every rank connects as a client
        "TORCHELASTIC_USE_AGENT_STORE": "True",
    }


def own_random_state() -> None:
    """A forked rank starts with its zygote's generators; torchrun's workers, separate interpreters, each seed
    Python's `random` (and NumPy's global generator, when imported) from the OS, so unseeded draws differ from rank to
    rank there. Reseed them from the OS here, as a new process would. torch's default generator starts from one fixed
    seed in every process, under torchrun too: left as it is. A program that seeds its generators still gets its
    own seeds, which it sets after this."""
    import random

    random.seed()
    # only where the zygote imported numpy.random (the preload does): touching np.random would import it (NumPy
    # loads it lazily), tens of milliseconds per rank, and a rank that imports it itself seeds it from the OS
    npr = sys.modules.get("numpy.random")
    if npr is not None:
        try:
            npr.seed()
        except Exception:  # noqa: BLE001  a NumPy without the legacy global generator: nothing shared to reseed
            pass


def _error_fields(e: BaseException, shown: str) -> dict:
    return {"type": type(e).__name__, "message": str(e)[:4000], "traceback": shown[-12000:],
            "site": trace.error_site(e)}


def main(spec: dict, rank: int, port: int, zygote: int) -> None:
    """Set the rank up, run its target, exit. A failure before the target runs propagates to the zygote, which
    writes its traceback to fd 2 (the rank's log once it is open below, else zygote.log) and exits with 70."""
    die_with_parent(signal.SIGKILL, zygote)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    run_dir, ws = spec["run_dir"], spec["world_size"]
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    log = os.open(rundir.log(run_dir, rank), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(null)
    sys.stdout = open(1, "w", buffering=1, closefd=False, errors="backslashreplace")
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")
    os.environ.update(spec.get("env") or {})
    nodes = spec.get("nodes")
    topo = spec["topology"] if nodes else None
    os.environ.update(torchrun_env(rank, ws, port, spec["run_id"], nodes=topo,
                                   master_addr=nodes[0]["hostname"] if nodes else "127.0.0.1"))
    own_random_state()
    stack = open(rundir.stack(run_dir, rank), "w")
    faulthandler.enable(file=sys.stderr, all_threads=True)  # a fatal signal leaves its Python stack in the log
    faulthandler.register(signal.SIGUSR1, file=stack, all_threads=True)
    armed = recorder.arm(run_dir, rank)  # before the user's code creates a group: the recorder reads its size then
    trace.start(rundir.trace(run_dir, rank), rank, world_size=ws,
                local_rank=(topo or topology.single(ws)).local_rank(rank), flight=armed)
    perturb.install(rank)  # an explored schedule's delays, if the run has one (sandbox.explore)
    ending.exit_now(run_target(spec, rank))


def run_target(spec: dict, rank: int) -> int:
    """Run the rank's target (spec["target"]: a function, a script or a module) as the user's program, record how
    it ended with `trace.finish`, do the exit work a Python program's end does (`sandbox.ending`), and return the
    exit code. A script or module target needs nothing else of `spec`; `python -m sandbox.trace` (the torchrun
    entry) runs its target here too."""
    import torch
    import torch.distributed as dist

    target = spec["target"]
    result = None
    ending.begin()
    try:
        if target["kind"] == "func":
            if spec.get("gpu"):
                torch.cuda.set_device(rank)
            if spec.get("init"):
                dist.init_process_group(spec.get("backend") or ("nccl" if spec.get("gpu") else "gloo"),
                                        timeout=datetime.timedelta(seconds=spec["pg_timeout_s"]),
                                        device_id=torch.device("cuda", rank) if spec.get("gpu") else None)
                all_joined(rank, spec["world_size"])
            result = _prepared["fn"](*_prepared["args"], **_prepared["kwargs"])
            ending.join_threads()  # before the group they may still use is destroyed
            if spec.get("init") and dist.is_initialized():
                dist.destroy_process_group()
        elif target["kind"] == "script":
            sys.argv = [target["path"]] + list(target["argv"])
            sys.path.insert(0, os.path.dirname(os.path.abspath(target["path"])))
            ending.ran(runpy.run_path(target["path"], run_name="__main__"))
        else:
            sys.argv = [target["name"]] + list(target["argv"])
            sys.path.insert(0, os.getcwd())
            ending.ran(runpy.run_module(target["name"], run_name="__main__", alter_sys=True))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
        ending.raised(e)
        ending.join_threads()
        recorder.dump(final=True)
        trace.finish("ok" if code == 0 else "exit", exit_code=code)
        ending.run_exit_work()
        return code
    except BaseException as e:  # noqa: BLE001  the rank's own failure, reported like Python would, then recorded
        shown = trace.user_traceback(e)  # as the user's program would print it: no sandbox frames
        ending.report(e, shown)
        ending.raised(e)
        ending.join_threads()
        recorder.dump(final=True)
        trace.finish("error", error=_error_fields(e, shown))
        ending.run_exit_work()
        return 1
    ending.join_threads()
    if target["kind"] == "func":
        try:
            import cloudpickle  # a value may be an instance of a class typed into a notebook cell

            with open(rundir.result(spec["run_dir"], rank), "wb") as f:
                cloudpickle.dump(result, f)
        except Exception as e:  # noqa: BLE001  the rank's work is done: an unpicklable value is reported, not a failure
            print(f"sandbox: the return value of rank {rank} could not be pickled: {e}", file=sys.stderr)
    recorder.dump(final=True)
    trace.finish("ok", exit_code=0)
    ending.run_exit_work()
    return 0


JOINED = "sandbox/joined/{}"  # a store key each rank sets once the group the sandbox made for it is made


def all_joined(rank: int, world: int) -> None:
    """After the sandbox's own init_process_group (`init=True`): wait until every rank's has returned. gloo lets a
    rank out of init while a peer is still connecting to it; a rank whose code then failed at once and exited broke
    that peer's init ("Gloo connectFullMesh failed"), and the peer never ran the code it was given. The sandbox made
    the group, so the user's code starts with a group made on every rank. Through the store: no collective, nothing
    in the trace or the Flight Recorder; bounded by the store's timeout (the group's)."""
    from sandbox import compat

    store = compat.default_store()
    store.set(JOINED.format(rank), "1")
    store.wait([JOINED.format(r) for r in range(world)])
