"""Benchmark of the sandbox's core promises, measured side by side in one run.

    python benchmarks/core.py [--repeat K]        # K repeats of everything (default 5), medians reported
    python benchmarks/core.py --only nodes        # only the measurements whose name holds a word (here 11, 12)

1. start-up:  `python -m sandbox.run -n 4 job.py` (a trivial gloo job: init, one all_reduce, destroy), the whole
              subprocess, vs `python -c "import torch"`                                   goal: <= 1.5x
2. torchrun:  the same job under `python -m torch.distributed.run --nproc-per-node 4` vs the sandbox
                                                                                          goal: sandbox >= 3x faster
3. scaling:   the sandbox with 8 ranks vs 4 ranks                                         goal: <= 1.3x
4. tracer:    per-call time of a loop of small all_reduces (2 ranks), traced (the sandbox's tracer, as installed)
              vs untraced (the same ranks calling torch's own functions, inside `sandbox.trace.paused()`);
              both loops run in the same ranks, in segments of mirrored order     goal: <= 1.10x
              (for reference: traced with the trace sent to /dev/null, i.e. the ranks' own cost without the
              watcher reading the events; and the same loop in a plain-python torchrun run)
5. hang:      a 2-rank send/send deadlock; seconds from the last rank blocking (the latest "enter" time of the
              pending calls) to the verdict: at detection (`blocked_for_s`) and when launch() returned
                                                                                          goal: <= 1.5 s
6. repro --list: `python -m sandbox.repro --list`, the whole subprocess, vs `python -c "import torch"`
              (listing the catalogue must not import torch)                                goal: <= 0.5x
7. provable deadlocks: the traces prove no rank can move, so the verdict need not wait `--hang-after` (1 s here):
              the send/send cycle of part 5, a collective mismatch (examples/mismatch.py, 4 ranks) and a cycle
              across two process groups (3 ranks), measured as part 5 is, from the last rank blocking to
              detection                                                                   goal: <= 0.2 s
8. training script: a 3-step DDP script (tiny model, SGD, a DataLoader with a DistributedSampler, backward, step,
              torch.save) as `python -m sandbox.run -n 4`, the whole subprocess, vs the same script as one plain
              process (world size 1); both in every repeat                                goal: <= 1.15x
              (the zygote imports what such a script imports lazily once, before the fork; for reference, the
              same with SANDBOX_PRELOAD=0, each rank importing it on its own; a run that hangs is stopped after
              30 s and counted as failed)
9. flight recorder: per-call time of the same all_reduce loop as part 4, untraced, with PyTorch's Flight Recorder
              on (as every sandbox rank runs) vs off (SANDBOX_FLIGHT=0); and the whole sandbox (tracer and
              recorder) vs neither                                                        goal: <= 1.10x
10. framework-level failures: the examples of examples/framework/ (DDP with uneven inputs, unused parameters, a
              model that differs; all_to_all splits; a shape mismatch; 4 ranks), seconds from the first rank
              blocking or failing (the earliest pending call's start, or the earliest `end` event of an error) to
              the run returning with the expected diagnosis                                 goal: <= 2 s
11. nodes:    `launch()` of a trivial function (one all_reduce, init by the sandbox) on 2 simulated nodes of 2
              ranks (`nnodes=2`: namespaces, a bridge, made and removed in the run) vs the same on 4 ranks of one
              node, the whole call; both in every repeat (needs root)                      goal: <= 1.5x
12. nodes, a long script: 20000 small all_reduces on 2 nodes of 2 ranks, `--launcher torchrun` (torchrun's agents,
              rendezvous and workers) vs the sandbox's own launcher, the whole subprocess; both in every repeat.
              The watcher must keep up with a long run, reading only what the workers appended (needs root)
                                                                                          goal: <= 2x
13. hash seeds: `python -m sandbox.run -n 4 job.py` as in part 1, its ranks dealt among two zygotes with their own
              string-hash seeds (the default, `sandbox.defaults.HASH_SEEDS`), vs the same with PYTHONHASHSEED set
              (one seed, one zygote), the whole subprocess; both in every repeat               goal: <= 1.15x
14. explore:  `python -m sandbox.run -n 4 --explore 16 job.py` (the job of part 1, which passes every schedule: one
              unperturbed run and 16 explored ones, forked by one warm zygote, three at once), the whole
              subprocess; beside it, part 1's single run                                  goal: <= 10 s
Each repeat runs every measurement once, in an order rotated from repeat to repeat, so the noise of this machine
hits all of them alike. The script always exits 0: it is a report, not a test.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

PY = sys.executable
LOOP_CALLS = 2000        # all_reduces per timed loop (part 4)
LOOP_NUMEL = 16          # floats per all_reduce
LOOP_WARMUP = 200
SUBPROCESS_TIMEOUT = 60  # seconds, for every subprocess and every launch()
LONG_CALLS = 20000       # all_reduces of the long script (part 12)
LONG_TIMEOUT = 300       # its runs take tens of seconds
MISMATCH = os.path.join(REPO, "examples", "mismatch.py")  # rank 2 broadcasts while ranks 0, 1, 3 all_reduce

# the examples of part 10 and the diagnosis each must get
FRAMEWORK = [("ddp_uneven", "uneven_steps"), ("ddp_unused", "unused_parameters"), ("ddp_wider", "model_differs"),
             ("a2a_splits", "collective_mismatch"), ("shape_mismatch", "collective_mismatch")]

# ------------------------------------------------------------------------------------------------ job scripts

TRIVIAL_JOB = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(4)
dist.all_reduce(t)
assert t[0].item() == dist.get_world_size()
dist.destroy_process_group()
"""

# the loop of part 4 as a plain script, for the torchrun (plain python, no tracer) reference
LOOP_JOB = f"""\
import os, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones({LOOP_NUMEL})
for _ in range({LOOP_WARMUP}):
    dist.all_reduce(t)
dist.barrier()
t0 = time.perf_counter()
for _ in range({LOOP_CALLS}):
    dist.all_reduce(t)
dt = time.perf_counter() - t0
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"percall-{{dist.get_rank()}}.txt"), "w") as f:
    f.write(repr(dt / {LOOP_CALLS}))
dist.destroy_process_group()
"""

# part 8: a small, typical training script (the one tests/test_startup.py measures)
LONG_JOB = f"""\
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
for _ in range({LONG_CALLS}):
    dist.all_reduce(t)
dist.destroy_process_group()
"""

DDP_JOB = """\
import os
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(64, 16), torch.randn(64, 1))
for step, (x, y) in enumerate(DataLoader(data, batch_size=8, sampler=DistributedSampler(data))):
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 2:
        break
if dist.get_rank() == 0:
    torch.save(model.module.state_dict(), os.path.join(os.path.dirname(os.path.abspath(__file__)), "ckpt.pt"))
dist.destroy_process_group()
"""


# ------------------------------------------------------------------------------------------------ rank functions
# Run by sandbox.launcher: the ranks import this file (as __sandbox_main__), so these live at module level and the
# module's top level imports nothing heavy.

def _loop_rank(calls: int, numel: int, warmup: int, traced_first: bool) -> dict:
    """Per-call time of all_reduces in this rank (init done by the sandbox): traced, untraced (inside
    `trace.paused()`: torch's own functions, nothing recorded), and traced with the trace written to /dev/null (the
    rank's own cost of tracing, without the watcher reading the events).

    The modes run in segments of calls/2 in a mirrored order (A B C C B A), so a drift in the machine's speed
    during the run hits every mode alike; `traced_first` swaps traced and untraced from one repeat to the next.
    """
    import contextlib

    import torch
    import torch.distributed as dist
    from sandbox import trace

    traced_ar = dist.all_reduce
    with trace.paused():
        was_traced = dist.all_reduce is not traced_ar  # paused, it is torch's own: it differs if it was wrapped
    t = torch.ones(numel)
    seg = max(1, calls // 2)

    def timed(mode: str) -> float:
        with trace.paused():
            dist.all_reduce(t)  # line both ranks up at the start of the segment (not timed, not traced)
        null = os.open(os.devnull, os.O_WRONLY) if mode == "devnull" else None
        sink = trace.set_sink(null) if null is not None else None
        try:
            with trace.paused() if mode == "untraced" else contextlib.nullcontext():
                ar = dist.all_reduce
                t0 = time.perf_counter()
                for _ in range(seg):
                    ar(t)
                return time.perf_counter() - t0
        finally:
            if null is not None:
                trace.set_sink(sink)
                os.close(null)

    with trace.paused():
        for _ in range(warmup):
            dist.all_reduce(t)
    modes = ["traced", "untraced", "devnull"] if traced_first else ["untraced", "traced", "devnull"]
    total = dict.fromkeys(modes, 0.0)
    for mode in modes + modes[::-1]:
        total[mode] += timed(mode)
    out = {mode: v / (2 * seg) for mode, v in total.items()}
    out["was_traced"] = was_traced
    return out


def _allreduce_rank() -> int:
    """Part 11's trivial job (init done by the sandbox): one all_reduce over every rank, its sum returned."""
    import torch
    import torch.distributed as dist

    t = torch.ones(4)
    dist.all_reduce(t)
    return int(t[0].item())


def _groups_cycle_rank() -> None:
    """Rank 1 waits in a sub-group's barrier for rank 0, which waits in the world's all_reduce for rank 1 (rank 2
    waits there too): a cycle across two process groups."""
    import torch
    import torch.distributed as dist

    sub = dist.new_group([0, 1])
    if dist.get_rank() == 1:
        dist.barrier(group=sub)
    dist.all_reduce(torch.ones(4))


def _sendsend_rank() -> None:
    """Both ranks send to each other first: neither send can complete (a blocking send/send deadlock)."""
    import torch
    import torch.distributed as dist

    me = dist.get_rank()
    dist.send(torch.ones(4), dst=1 - me)
    dist.recv(torch.zeros(4), src=1 - me)


# ------------------------------------------------------------------------------------------------ helpers

class Failed(Exception):
    pass


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # what the sandbox gives its ranks, given to torchrun's workers too (torchrun sets OMP_NUM_THREADS=1 itself)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return env


def _run(cmd: list[str], cwd: str, timeout: float = SUBPROCESS_TIMEOUT,
         env: dict | None = None) -> tuple[float, str]:
    """Wall clock of a subprocess (its own session, so on timeout all it started is ended), and its stdout. A None
    in `env` unsets that variable."""
    t0 = time.perf_counter()
    env = {k: v for k, v in dict(_env(), **(env or {})).items() if v is not None}
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:  # the group ended on its own meanwhile
            pass
        p.communicate()
        raise Failed(f"{' '.join(cmd[:4])} ... took more than {timeout:g} s") from None
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        tail = (err or out).decode(errors="replace").strip().splitlines()[-3:]
        raise Failed(f"{' '.join(cmd[:4])} ... exited {p.returncode}: {' | '.join(tail)}")
    return dt, out.decode(errors="replace")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(n: int, script: str, cwd: str) -> tuple[float, str]:
    return _run([PY, "-m", "torch.distributed.run", "--nproc-per-node", str(n), "--master-addr", "127.0.0.1",
                 "--master-port", str(_free_port()),
                 # torchrun's own files under the benchmark's temp dir: by default it leaves a /tmp/torchelastic_*
                 "--log-dir", tempfile.mkdtemp(prefix="torchrun-", dir=cwd), script], cwd)


def _sig(x: float) -> str:
    """2-3 significant digits."""
    if x == 0:
        return "0"
    return f"{x:#.3g}".rstrip(".") if abs(x) < 1000 else f"{x:.0f}"  # 1.00, 0.931, 692, 1234


def _secs(x: float | None) -> str:
    return "-" if x is None else f"{_sig(x)} s"


def _us(x: float | None) -> str:
    return "-" if x is None else f"{_sig(x * 1e6)} us"


def _median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# ------------------------------------------------------------------------------------------------ measurements

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/core.py", description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5, metavar="K", help="repeats of every measurement (default 5)")
    ap.add_argument("--only", metavar="WORDS", help="comma-separated: run only the measurements whose name holds one"
                                                    " of these words (e.g. nodes, tracer, ddp); the others show no row")
    a = ap.parse_args(argv)
    only = [w.strip() for w in (a.only or "").split(",") if w.strip()]

    def chosen(name: str) -> bool:
        return not only or any(w in name for w in only)
    K = max(1, a.repeat)

    import sandbox
    from sandbox import launch, run_script

    samples: dict[str, list] = {}
    failures: dict[str, list[str]] = {}

    def record(name: str, value) -> None:
        samples.setdefault(name, []).append(value)

    def fail(name: str, why: str) -> None:
        failures.setdefault(name, []).append(why)

    t_begin = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-") as tmp:
        job = os.path.join(tmp, "job.py")
        loop_job = os.path.join(tmp, "loop_job.py")
        with open(job, "w") as f:
            f.write(TRIVIAL_JOB)
        with open(loop_job, "w") as f:
            f.write(LOOP_JOB)
        ddp_job = os.path.join(tmp, "ddp_job.py")
        with open(ddp_job, "w") as f:
            f.write(DDP_JOB)
        long_job = os.path.join(tmp, "long_job.py")
        with open(long_job, "w") as f:
            f.write(LONG_JOB)

        def import_torch():
            record("import_torch", _run([PY, "-c", "import torch"], tmp)[0])

        def sandbox_n(n):
            def go():
                record(f"sandbox_{n}", _run([PY, "-m", "sandbox.run", "-n", str(n), job], REPO)[0])
            return go

        def sandbox_one_seed():  # PYTHONHASHSEED set: every rank has that seed, one zygote forks them all
            record("sandbox_4_one_seed", _run([PY, "-m", "sandbox.run", "-n", "4", job], REPO,
                                              env={"PYTHONHASHSEED": "0"})[0])

        def torchrun_4():
            record("torchrun_4", _torchrun(4, job, tmp)[0])

        def explore_16():
            secs, out = _run([PY, "-m", "sandbox.run", "-n", "4", "--explore", "16", job], REPO)
            if "ok: 16 runs" not in out:
                raise Failed(f"--explore 16 of the trivial job did not pass all 16: {out[-300:]}")
            record("explore_16", secs)

        k_box = [0]

        def tracer_loop():
            traced_first = k_box[0] % 2 == 0
            res = launch(_loop_rank, world_size=2, args=(LOOP_CALLS, LOOP_NUMEL, LOOP_WARMUP, traced_first),
                         init=True, timeout=SUBPROCESS_TIMEOUT)
            if not res.ok:
                raise Failed(f"loop run: {res.verdict}: {res.diagnosis.summary}")
            vals = res.values
            if not all(v["was_traced"] for v in vals):
                raise Failed("the ranks' dist.all_reduce is not the tracer's wrapper: nothing to compare")
            # the ranks are coupled by every all_reduce: the slower rank's loop is the loop's time
            record("loop_traced", max(v["traced"] for v in vals))
            record("loop_untraced", max(v["untraced"] for v in vals))
            record("loop_devnull", max(v["devnull"] for v in vals))
            record("loop_events", len(res.events))

        def flight_off_loop():
            res = launch(_loop_rank, world_size=2, args=(LOOP_CALLS, LOOP_NUMEL, LOOP_WARMUP, k_box[0] % 2 == 0),
                         init=True, timeout=SUBPROCESS_TIMEOUT, env={"SANDBOX_FLIGHT": "0"})
            if not res.ok:
                raise Failed(f"loop run without the recorder: {res.verdict}: {res.diagnosis.summary}")
            record("loop_untraced_nofr", max(v["untraced"] for v in res.values))
            record("loop_traced_nofr", max(v["traced"] for v in res.values))

        def framework(name: str, kind: str):
            def go():
                res = run_script(os.path.join(REPO, "examples", "framework", f"{name}.py"), world_size=4,
                                 timeout=SUBPROCESS_TIMEOUT)
                t_back = time.time()
                if res.diagnosis.kind != kind:
                    raise Failed(f"{name} came back as {res.verdict!r} [{res.diagnosis.kind}], not [{kind}]")
                first = [r.pending["since"] for r in res.ranks if r.pending and r.pending.get("since")]
                first += [e["t"] for e in res.events if e.get("ev") == "end" and e.get("outcome") == "error"]
                if not first:
                    raise Failed(f"{name}: no rank blocked or failed in the result")
                record(f"fw_{name}", t_back - min(first))
            return go

        def torchrun_loop():
            files = [os.path.join(tmp, f"percall-{r}.txt") for r in range(2)]
            for path in files:
                if os.path.exists(path):
                    os.unlink(path)
            _torchrun(2, loop_job, tmp)
            per = []
            for path in files:
                try:
                    with open(path) as f:
                        per.append(float(f.read()))
                except (OSError, ValueError) as e:
                    raise Failed(f"torchrun loop left no time in {os.path.basename(path)}: {e}") from None
            record("loop_torchrun", max(per))

        def deadlock(name: str, what: str, kind: str, start) -> None:
            """Seconds from the last rank blocking (the latest "enter" of the pending calls) to detection
            (`blocked_for_s`) and to the run returning, for a run that must end as a hang of `kind`."""
            res = start()
            t_back = time.time()
            if (res.verdict, res.diagnosis.kind) != ("hang", kind):
                raise Failed(f"{what} came back as {res.verdict!r} [{res.diagnosis.kind}], not 'hang' [{kind}]:"
                             f" {res.diagnosis.summary}")
            since = [r.pending["since"] for r in res.ranks if r.pending and r.pending.get("since") is not None]
            if len(since) != res.world_size:  # fall back on the trace: the last "enter" without an "exit" of each rank
                exited = {(e.get("rank"), e.get("id")) for e in res.events if e.get("ev") == "exit"}
                since = [e["t"] for e in res.events if e.get("ev") == "enter"
                         and (e.get("rank"), e.get("id")) not in exited]
            if not since:
                raise Failed(f"no pending call found in the result of the {what}")
            last_block = max(since)
            detect = res.diagnosis.details.get("blocked_for_s")
            if detect is None:  # the other figures of the run still count
                fail(name, f"the {what}'s diagnosis has no blocked_for_s: detection time unknown")
            record(f"{name}_detect", detect)
            record(f"{name}_return", t_back - last_block)
            record(f"{name}_wall", res.wall_s)

        def hang():
            deadlock("hang", "send/send deadlock", "p2p_cycle",
                     lambda: launch(_sendsend_rank, world_size=2, init=True, hang_after=1.0,
                                    timeout=SUBPROCESS_TIMEOUT))

        def mismatch():
            deadlock("mismatch", "collective mismatch", "collective_mismatch",
                     lambda: run_script(MISMATCH, world_size=4, hang_after=1.0, timeout=SUBPROCESS_TIMEOUT))

        def groups_cycle():
            deadlock("groups_cycle", "cycle across groups", "wait_cycle",
                     lambda: launch(_groups_cycle_rank, world_size=3, init=True, hang_after=1.0,
                                    timeout=SUBPROCESS_TIMEOUT))

        def nodes_launch(nnodes: int, key: str):
            def go():
                t0 = time.perf_counter()
                res = launch(_allreduce_rank, world_size=4, init=True, nnodes=nnodes, timeout=SUBPROCESS_TIMEOUT)
                dt = time.perf_counter() - t0
                if not res.ok or res.values != [4] * 4:
                    raise Failed(f"{key}: {res.verdict}: {res.diagnosis.summary} (values {res.values})")
                record(key, dt)
            return go

        def nodes_long(launcher: str, key: str):
            def go():
                record(key, _run([PY, "-m", "sandbox.run", "--nnodes", "2", "--nproc-per-node", "2", "--launcher",
                                  launcher, "--timeout", str(LONG_TIMEOUT), long_job], REPO, timeout=LONG_TIMEOUT + 30,
                                 env={"GLOO_SOCKET_IFNAME": None})[0])
            return go

        def repro_list():
            record("repro_list", _run([PY, "-m", "sandbox.repro", "--list"], REPO)[0])

        def ddp_plain():  # one process, torchrun's variables for a world of one
            record("ddp_plain", _run([PY, ddp_job], tmp, env={"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                                                               "MASTER_ADDR": "127.0.0.1",
                                                               "MASTER_PORT": str(_free_port())})[0])

        def ddp_sandbox():
            record("ddp_sandbox_4", _run([PY, "-m", "sandbox.run", "-n", "4", "--timeout", "30", ddp_job], REPO)[0])

        def ddp_sandbox_preload():
            record("ddp_preload_4", _run([PY, "-m", "sandbox.run", "-n", "4", "--timeout", "30", ddp_job], REPO,
                                         env={"SANDBOX_PRELOAD": "0"})[0])

        tasks = [("import torch", import_torch), ("sandbox -n 4", sandbox_n(4)), ("sandbox -n 8", sandbox_n(8)),
                 ("sandbox -n 4, one hash seed", sandbox_one_seed), ("explore 16", explore_16),
                 ("torchrun 4", torchrun_4), ("tracer loop", tracer_loop), ("torchrun loop", torchrun_loop),
                 ("hang", hang), ("repro --list", repro_list), ("mismatch", mismatch),
                 ("cycle across groups", groups_cycle),
                 ("ddp plain", ddp_plain), ("ddp sandbox -n 4", ddp_sandbox),
                 ("ddp sandbox -n 4, no preload", ddp_sandbox_preload), ("loop without the recorder", flight_off_loop)]
        tasks += [(f"framework {n}", framework(n, k)) for n, k in FRAMEWORK]
        tasks += [("nodes: 4 ranks, one node", nodes_launch(1, "launch_4")),
                  ("nodes: 2x2 ranks on 2 nodes", nodes_launch(2, "launch_2x2")),
                  ("nodes: long script, own launcher", nodes_long("sandbox", "long_own")),
                  ("nodes: long script, torchrun", nodes_long("torchrun", "long_torchrun"))]
        tasks = [(name, go) for name, go in tasks if chosen(name)]
        if not tasks:
            print(f"no measurement's name holds {', '.join(only)}", file=sys.stderr)
            return 2

        print(f"sandbox {sandbox.__version__} at {REPO}; python {sys.version.split()[0]}; {os.cpu_count()} CPUs;"
              f" load {os.getloadavg()[0]:.2f}; {K} repeats", flush=True)
        # warm-up, not counted: page cache for torch's files, __pycache__ of the job scripts
        for name, cmd, cwd in (("import torch", [PY, "-c", "import torch"], tmp),
                               ("sandbox -n 2", [PY, "-m", "sandbox.run", "-n", "2", job], REPO),
                               ("repro --list", [PY, "-m", "sandbox.repro", "--list"], REPO),
                               ("ddp plain", [PY, "-c", "import torch._dynamo"], tmp),
                               ("nodes 2x2", [PY, "-m", "sandbox.run", "--nnodes", "2", "--nproc-per-node", "2", job],
                                REPO)):
            if name == "nodes 2x2" and not any(t.startswith("nodes:") for t, _ in tasks):
                continue  # no node measurement: no nodes made (nor a failure printed where root is missing)
            if only and name not in ("sandbox -n 2", "nodes 2x2") and not chosen(name):
                continue  # "sandbox -n 2" warms torch's files for every run of the sandbox
            try:
                # across nodes gloo must pick the node's own interface, not the loopback _env() names for torchrun
                _run(cmd, cwd, env={"GLOO_SOCKET_IFNAME": None} if name == "nodes 2x2" else None)
            except Failed as e:
                print(f"  warm-up {name} failed: {e}")
        for k in range(K):
            k_box[0] = k
            order = tasks[k % len(tasks):] + tasks[:k % len(tasks)]
            t_rep = time.perf_counter()
            for name, go in order:
                try:
                    go()
                except Failed as e:
                    fail(name, str(e))
                except Exception as e:  # noqa: BLE001  a benchmark keeps going and says what broke
                    fail(name, f"{type(e).__name__}: {e}")
            print(f"  repeat {k + 1}/{K}: {time.perf_counter() - t_rep:.1f} s", flush=True)

    m = {name: _median(v) for name, v in samples.items()}
    g = m.get

    def ratio(x, y):
        return None if x is None or y is None or y == 0 else x / y

    rows = []  # (what, value, baseline name, baseline value, ratio text, goal, ok)

    def row(what, val, fmt, base_name, base, r, goal_text, ok):
        rows.append((what, fmt(val), base_name, fmt(base), "-" if r is None else f"{_sig(r)}x", goal_text,
                     "-" if ok is None else ("PASS" if ok else "MISS")))

    r1 = ratio(g("sandbox_4"), g("import_torch"))
    row("1. sandbox.run -n 4 (whole process)", g("sandbox_4"), _secs, "import torch", g("import_torch"), r1,
        "<= 1.5x", None if r1 is None else r1 <= 1.5)
    r2 = ratio(g("torchrun_4"), g("sandbox_4"))
    row("2. torchrun 4 / sandbox 4", g("torchrun_4"), _secs, "sandbox -n 4", g("sandbox_4"), r2,
        ">= 3x", None if r2 is None else r2 >= 3.0)
    r3 = ratio(g("sandbox_8"), g("sandbox_4"))
    row("3. sandbox.run -n 8", g("sandbox_8"), _secs, "sandbox -n 4", g("sandbox_4"), r3,
        "<= 1.3x", None if r3 is None else r3 <= 1.3)
    r13 = ratio(g("sandbox_4"), g("sandbox_4_one_seed"))
    row("13. sandbox.run -n 4, 2 hash seeds", g("sandbox_4"), _secs, "one seed", g("sandbox_4_one_seed"), r13,
        "<= 1.15x", None if r13 is None else r13 <= 1.15)
    row("14. sandbox.run -n 4 --explore 16", g("explore_16"), _secs, "sandbox -n 4", g("sandbox_4"),
        ratio(g("explore_16"), g("sandbox_4")), "<= 10 s", None if g("explore_16") is None else g("explore_16") <= 10)
    r4 = ratio(g("loop_traced"), g("loop_untraced"))
    row("4. all_reduce per call, traced", g("loop_traced"), _us, "untraced", g("loop_untraced"), r4,
        "<= 1.10x", None if r4 is None else r4 <= 1.10)
    row("   (ref) traced, trace to /dev/null", g("loop_devnull"), _us, "untraced", g("loop_untraced"),
        ratio(g("loop_devnull"), g("loop_untraced")), "", None)
    row("   (ref) traced vs plain torchrun", g("loop_traced"), _us, "torchrun", g("loop_torchrun"),
        ratio(g("loop_traced"), g("loop_torchrun")), "", None)
    row("5. hang: last block -> launch() returned", g("hang_return"), _secs, "", None, None,
        "<= 1.5 s", None if g("hang_return") is None else g("hang_return") <= 1.5)
    row("   hang: last block -> detection", g("hang_detect"), _secs, "", None, None,
        "<= 1.5 s", None if g("hang_detect") is None else g("hang_detect") <= 1.5)
    r6 = ratio(g("repro_list"), g("import_torch"))
    row("6. repro --list (whole process)", g("repro_list"), _secs, "import torch", g("import_torch"), r6,
        "<= 0.5x", None if r6 is None else r6 <= 0.5)
    row("7. send/send cycle: last block -> detection", g("hang_detect"), _secs, "", None, None,
        "<= 0.2 s", None if g("hang_detect") is None else g("hang_detect") <= 0.2)
    row("   collective mismatch: last block -> detection", g("mismatch_detect"), _secs, "", None, None,
        "<= 0.2 s", None if g("mismatch_detect") is None else g("mismatch_detect") <= 0.2)
    row("   cycle across groups: last block -> detection", g("groups_cycle_detect"), _secs, "", None, None,
        "<= 0.2 s", None if g("groups_cycle_detect") is None else g("groups_cycle_detect") <= 0.2)
    row("   collective mismatch: last block -> returned", g("mismatch_return"), _secs, "", None, None,
        "", None)
    r8 = ratio(g("ddp_sandbox_4"), g("ddp_plain"))
    row("8. DDP script, sandbox.run -n 4", g("ddp_sandbox_4"), _secs, "one plain process", g("ddp_plain"), r8,
        "<= 1.15x", None if r8 is None else r8 <= 1.15)
    row("   (ref) the same, SANDBOX_PRELOAD=0", g("ddp_preload_4"), _secs, "one plain process", g("ddp_plain"),
        ratio(g("ddp_preload_4"), g("ddp_plain")), "", None)

    r9 = ratio(g("loop_untraced"), g("loop_untraced_nofr"))
    row("9. all_reduce per call, recorder on", g("loop_untraced"), _us, "recorder off", g("loop_untraced_nofr"), r9,
        "<= 1.10x", None if r9 is None else r9 <= 1.10)
    r9b = ratio(g("loop_traced"), g("loop_untraced_nofr"))
    row("   tracer and recorder", g("loop_traced"), _us, "neither", g("loop_untraced_nofr"), r9b, "", None)
    for n, _ in FRAMEWORK:
        v = g(f"fw_{n}")
        row(f"10. {n}: first block/failure -> returned", v, _secs, "", None, None, "<= 2 s",
            None if v is None else v <= 2.0)
    r11 = ratio(g("launch_2x2"), g("launch_4"))
    row("11. launch() 2 nodes x 2 ranks", g("launch_2x2"), _secs, "4 ranks, one node", g("launch_4"), r11,
        "<= 1.5x", None if r11 is None else r11 <= 1.5)
    r12 = ratio(g("long_torchrun"), g("long_own"))
    row(f"12. {LONG_CALLS} calls, --launcher torchrun", g("long_torchrun"), _secs, "own launcher", g("long_own"), r12,
        "<= 2x", None if r12 is None else r12 <= 2.0)
    if only:  # the measurements left out have no figure: no row
        rows = [r for r in rows if r[1] != "-"]

    head = ("measure", "median", "baseline", "median", "ratio", "goal", "")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    print()
    print("  ".join(str(h).ljust(w) for h, w in zip(head, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())

    print(f"\nmedians of {K} repeats; samples (s, or us per call):")
    labels = {"import_torch": "import torch", "sandbox_4": "sandbox -n 4", "sandbox_8": "sandbox -n 8",
              "sandbox_4_one_seed": "sandbox -n 4, one seed", "torchrun_4": "torchrun 4", "loop_traced": "loop traced", "loop_untraced": "loop untraced",
              "loop_devnull": "loop /dev/null", "loop_torchrun": "loop torchrun", "hang_detect": "hang detect",
              "hang_return": "hang return", "hang_wall": "hang launch wall", "repro_list": "repro --list",
              "mismatch_detect": "mismatch detect", "mismatch_return": "mismatch return",
              "mismatch_wall": "mismatch wall", "groups_cycle_detect": "groups cycle detect",
              "groups_cycle_return": "groups cycle return", "groups_cycle_wall": "groups cycle wall",
              "ddp_plain": "ddp plain", "ddp_sandbox_4": "ddp sandbox -n 4",
              "ddp_preload_4": "ddp preload -n 4", "loop_untraced_nofr": "loop no recorder",
              "loop_traced_nofr": "loop traced, no recorder", **{f"fw_{n}": n for n, _ in FRAMEWORK},
              "launch_4": "launch 4, 1 node", "launch_2x2": "launch 2x2 nodes", "long_own": "long, own launcher",
              "long_torchrun": "long, torchrun", "explore_16": "explore 16"}
    for key, label in labels.items():
        vs = samples.get(key)
        if not vs:
            continue
        scale = 1e6 if key.startswith("loop_") else 1.0
        print(f"  {label:<17} " + " ".join(_sig(v * scale) for v in vs))
    pairs = list(zip(samples.get("ddp_sandbox_4", []), samples.get("ddp_plain", [])))
    # each repeat's own ratio: both ran in it, under the same load
    if pairs and len(samples["ddp_sandbox_4"]) == len(samples["ddp_plain"]):
        print("  ddp ratio, each repeat: " + " ".join(f"{_sig(a / b)}x" for a, b in pairs if b))
    pairs = list(zip(samples.get("launch_2x2", []), samples.get("launch_4", [])))
    if pairs and len(samples["launch_2x2"]) == len(samples["launch_4"]):
        print("  nodes ratio, each repeat: " + " ".join(f"{_sig(a / b)}x" for a, b in pairs if b))
    if g("hang_return") is not None and g("hang_detect") is not None:
        print(f"  hang: {_secs(g('hang_return') - g('hang_detect'))} from detection to launch() returning"
              " (stacks, kill, reap, diagnosis)")
    if g("loop_traced") is not None and g("loop_untraced") is not None:
        print(f"  tracer: +{_us(g('loop_traced') - g('loop_untraced'))} per traced call"
              f" ({_sig(g('loop_events') or 0)} trace events per loop run)")
    for name, whys in failures.items():
        print(f"  FAILED {name} ({len(whys)}x): {whys[0]}")
    print(f"\ntotal {time.perf_counter() - t_begin:.0f} s")
    return 0


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
    sys.exit(0)
