import atexit
import contextlib
import concurrent.futures
import ctypes
import fcntl
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil
import pytest

from sandbox import nodes, warm
from sandbox.bugs import SHARED_RUNS_ENV, registry, shared_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/scenarios.py is importable by the ranks

# Adopt orphans: if a run of ours leaked a process whose parent died, it is re-parented to this pytest process
# (not to init), so `leftovers()` finds it by parentage.
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER

# Under xdist a worker inherits TMPDIR from the controller: the controller's own temp dir, removed when it finishes.
# What the workers share (the docs site, built once) lives there.
_SHARED_TMP = os.environ.get("TMPDIR") if os.environ.get("PYTEST_XDIST_WORKER") else None

# Every launch of this test process forks its ranks from one warm zygote (torch imported once per worker, a run
# costs a fork): what the tests test is the run, not the import. As for a user, SANDBOX_WARM in the environment
# still decides; the cold path is tested on purpose where it is the subject (warm=False or SANDBOX_WARM=0:
# test_startup, test_hygiene, test_warm, test_lab). Subprocesses (CLIs, kernels) keep the product's own default.
# Likewise one string-hash seed per run (one zygote), not the product's two (sandbox.defaults.HASH_SEEDS): a second
# interpreter per cold run and per kernel cost the suite about a third more CPU, and no test but the seeds' own asks
# what the hash order is. Those (test_hash_seeds, test_hash_order_cases, test_hygiene's process tree) set it back.
os.environ.setdefault("SANDBOX_HASH_SEEDS", "1")
_product_default = warm.default
warm.default = lambda: _product_default() if "SANDBOX_WARM" in os.environ else True

# Runs of this test session make their temp dirs here, so the leftovers check sees only ours.
_TMP = tempfile.mkdtemp(prefix="sandbox-tests-")
os.environ["TMPDIR"] = _TMP
tempfile.tempdir = _TMP
# also where pytest stops before a session (a usage error such as an unknown option): no sessionfinish then
atexit.register(shutil.rmtree, _TMP, True)


def pytest_sessionfinish(session, exitstatus):
    import shutil
    shutil.rmtree(_TMP, ignore_errors=True)


def python() -> str:
    return sys.executable


# The commands whose `main(argv)` run_cli calls in this process, with the name `cli.guarded` gives them.
_IN_PROCESS = {"sandbox.run": ("sandbox.run", "sandbox.run"), "sandbox.repro": ("sandbox.repro", "sandbox.repro"),
               "sandbox.diagnose": ("sandbox.diagnose.__main__", "sandbox.diagnose"),
               "sandbox.bench": ("sandbox.bench.__main__", "sandbox.bench")}


def run_cli(*args, timeout=120, env=None, process=False, **kw):
    """`python -m <args>` from the project root: what it prints and its exit code, as a CompletedProcess.

    The sandbox's commands are answered in this process by their own `main(argv)`, under `cli.guarded` as their
    `__main__` runs it, with `env` set and `cwd` entered meanwhile, stdout and stderr captured; an exception that
    escapes is printed as the interpreter prints it, exit code 1. Its runs fork from this worker's warm zygote (a
    subprocess would import torch twice, for itself and its zygote). `process=True`, or another module, runs a
    real subprocess instead (a bounded wait): where the process is the subject (signals, what the interpreter
    does, a launcher killed)."""
    if process or args[0] not in _IN_PROCESS:
        e = dict(os.environ, **(env or {}))
        e["PYTHONPATH"] = os.pathsep.join(filter(None, [(env or {}).get("PYTHONPATH"), ROOT,
                                                        os.path.join(ROOT, "tests")]))
        return subprocess.run([python(), "-m", *args], capture_output=True, text=True, timeout=timeout,
                              cwd=kw.pop("cwd", ROOT), env=e, **kw)
    assert not kw.keys() - {"cwd"}, f"run_cli in-process takes cwd and env only, not {sorted(kw.keys() - {'cwd'})}"
    return _in_process(list(args), env or {}, kw.get("cwd", ROOT))


def _in_process(args: list, env: dict, cwd: str) -> subprocess.CompletedProcess:
    import importlib

    from sandbox import cli

    module, prog = _IN_PROCESS[args[0]]
    main = importlib.import_module(module).main
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        code, out, err = cli.answer(main, args[1:], prog)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["python", "-m", *args], code, out, err)


def sandbox_dirs() -> set:
    d = tempfile.gettempdir()
    return {n for n in os.listdir(d) if n.startswith("sandbox-run-")}


GRACE_S = 2.0  # how long a process we killed may take to disappear (SIGKILL is delivered asynchronously)


def _descendants() -> dict:
    """Processes descended from this test process (ranks, zygotes, CLIs), zombies reaped first: pid -> description.
    This process's warm zygote is not one of them while idle, nor its siblings (one per further hash seed): they
    serve the whole session (their runs are)."""
    me = psutil.Process()
    out = {}
    keep = warm.running()
    for c in me.children(recursive=True):
        if c.pid in (keep, _kernels.get("pid")):
            continue
        try:
            if keep is not None and c.ppid() == keep and "--warm-sibling" in c.cmdline():
                continue
            if c.status() == psutil.STATUS_ZOMBIE:
                try:
                    os.waitpid(c.pid, os.WNOHANG)
                except ChildProcessError:  # a zombie of another parent (a zygote's rank): that parent is listed
                    pass
                continue
            out[c.pid] = f"{c.pid} pgid={os.getpgid(c.pid)} {' '.join(c.cmdline())[:120]}"
        except (psutil.NoSuchProcess, ProcessLookupError):  # it died while we looked: that is what we want
            pass
    return out


def leftovers(grace: float = GRACE_S) -> list:
    """Processes descended from this test process that are still there after up to `grace` seconds: a process
    that is dying when the check starts is not a leftover, one that lives past the grace period is."""
    deadline = time.monotonic() + grace
    while True:
        out = _descendants()
        if not out or time.monotonic() >= deadline:
            return list(out.values())
        time.sleep(0.02)


def case_header(path: str) -> dict:
    """A blind-written case program's header lines (`# world: W`, `# kind: K`, `# culprits: 1,2` or `none`)."""
    got = dict(re.findall(r"^# (\w+): (.*)$", open(path).read(), re.M))
    culprits = got["culprits"].strip()
    return {"world": int(got["world"]), "kind": got["kind"].strip(),
            "culprits": [] if culprits == "none" else [int(x) for x in culprits.split(",")]}


def run_cases(folder: str, names: list[str]) -> dict:
    """{name: RunResult} of folder/NAME.py on its header's world size, three at a time; nothing left after."""
    from sandbox import run_script

    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: pool.submit(run_script, os.path.join(folder, name + ".py"),
                                     world_size=case_header(os.path.join(folder, name + ".py"))["world"], timeout=90)
                   for name in names}
        done = {name: f.result() for name, f in futures.items()}
    assert leftovers() == []
    return done


def raced(res) -> bool:
    """Did the run end in the race a program leaves open (no call every rank makes after the last one that
    needs a slow rank): a rank still connecting in init_process_group or new_group lost peers that had finished, as
    under plain torchrun on a loaded machine, before the program could show anything else? Then it is named as
    such, the ranks named as leaving having finished."""
    if res.diagnosis.kind != "left_early":
        return False
    outcome = {r.rank: r.outcome for r in res.ranks}
    assert res.diagnosis.culprit_ranks and all(outcome[r] == "ok" for r in res.diagnosis.culprit_ranks), \
        (res.diagnosis.summary, outcome)
    return True


def gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for its parent counts as exited)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def still_running(pids, grace: float = GRACE_S) -> list:
    """Those of `pids` still running after up to `grace` seconds (zombies re-parented to us are reaped meanwhile)."""
    deadline = time.monotonic() + grace
    while True:
        _descendants()
        alive = [p for p in pids if not gone(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.02)


def wait_for(condition, what: str, timeout: float = 60):
    """Poll `condition()` until it returns something true, for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = condition()
        if got:
            return got
        time.sleep(0.005)
    raise AssertionError(f"waited {timeout} s for {what}")


def listening_ports() -> set:
    """Ports that this test process or any of its descendants listen on."""
    me = psutil.Process()
    ours = {me.pid} | {c.pid for c in me.children(recursive=True)}
    return {c.laddr.port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN and c.pid in ours}


def port_is_listening(port: int) -> bool:
    return any(c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in psutil.net_connections("tcp"))


def assert_group_gone(pgid: int) -> None:
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        _descendants()  # reaps the group's zombies re-parented here
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    raise AssertionError(f"process group {pgid} of a finished run still has members")


@pytest.fixture
def clean():
    """Checks after the test that no process, temp dir or listening socket of ours is left."""
    dirs = sandbox_dirs()
    yield
    left = leftovers()
    for pid in _descendants():  # what the failed check found, so the next test starts clean
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended after all
            pass
    assert left == []
    # a zygote whose parent was killed removes the run's temp dir as it dies: give it the same grace period
    deadline = time.monotonic() + GRACE_S
    while sandbox_dirs() - dirs and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sandbox_dirs() - dirs == set()
    assert listening_ports() == set()  # of this machine's namespace: a simulated node's go with the node, next
    assert nodes.leftovers(os.getpid()) == []  # namespaces, their mounts and hosts folders of runs made here


@pytest.fixture
def two_nodes(clean):
    """Simulated nodes can be made here (root), else a skip with the reason; asked in the test process only (the
    ranks import a test module too: they must not probe)."""
    ok, why = nodes.available()
    if not ok:
        pytest.skip(why)


def _shared(name: str) -> str:
    """A folder every worker of this test run sees (the controller's temp dir under xdist, else this process's)."""
    path = os.path.join(_SHARED_TMP or _TMP, name)
    os.makedirs(path, exist_ok=True)
    return path


LABS = sorted(glob.glob(os.path.join(ROOT, "labs", "*.ipynb")))


def lab_cache() -> str:
    """Where executed_lab keeps the executed copies, with a NAME.json and a NAME.lock per lab."""
    return _shared("labs-executed")


def executed_lab(path: str) -> dict:
    """`path` executed in a real kernel (docs/labs_run.py), once per test run: the first worker to ask executes it,
    under a lock of its own, and every later asker (test_labs.py, the docs build) reads the copy. {"rc", "dest",
    "stderr", "seconds"}; "cached": it was executed by an earlier asker. A lab that failed is not run again: its
    failure is the answer for every reader (the build would fail on it as test_labs does)."""
    need(*NOTEBOOK_PACKAGES)
    labs_run = docs_module("labs_run")  # the build executes labs the same way

    base = lab_cache()
    name = os.path.basename(path)
    with open(os.path.join(base, name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # bounded: the holder's execution has its own limit (LAB_TIMEOUT_S)
        done = os.path.join(base, name + ".json")
        if os.path.exists(done):
            with open(done) as f:
                return dict(json.load(f), cached=True)
        # its kernel's catalogue runs on the documented ranks are the session's (test_catalogue's, the build's), and
        # its other runs fork from this worker's warm zygote (sandbox.warm.share), not from one of the kernel's own
        extra = {SHARED_RUNS_ENV: _shared("catalogue-runs"), warm.SHARE_ENV: shared_zygote()}
        # the kernel itself is forked from this worker's kernel server (torch, the sandbox and ipykernel imported)
        r = labs_run.execute(path, os.path.join(base, name), kernel_server(labs_run, extra), extra)
        with open(done, "w") as f:
            json.dump(r, f)
        return dict(r, cached=False)


_kernels_lock = threading.Lock()
_kernels: dict = {}  # this worker's kernel server: {"pid", "jupyter": the JUPYTER_PATH folder of its kernelspec}


def kernel_server(labs_run, extra: dict) -> str:
    """The JUPYTER_PATH folder of a kernelspec (named as the labs' own) whose kernels this worker's kernel server
    forks (docs/kernel_zygote.py): a lab's kernel costs a fork, not an interpreter that imports torch. Started at
    the first lab, from a thread that lasts (the server dies with the thread that started it: PR_SET_PDEATHSIG), in
    the environment every lab's kernel has; it ends with this worker."""
    with _kernels_lock:  # the lab tests execute labs ahead in threads: one server for them all
        if not _kernels:
            _start_kernel_server(labs_run, extra)
    return _kernels["jupyter"]


def _start_kernel_server(labs_run, extra: dict) -> None:
    kz = docs_module("kernel_zygote")
    folder = tempfile.mkdtemp(prefix="kernel-server-")
    sock = os.path.join(folder, "server.sock")
    env = dict(labs_run.env(), **extra)

    def start():
        with open(os.path.join(folder, "server.log"), "wb") as log:
            return subprocess.Popen([sys.executable, kz.__file__, "serve", sock, str(os.getpid())], env=env,
                                    cwd=labs_run.LABS_DIR, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=log, start_new_session=True).pid
    pid = warm._from_a_lasting_thread(start)
    _kernels.update(pid=pid, jupyter=kz.kernelspec(os.path.join(folder, "jupyter"), sock, labs_run.KERNEL))


def shared_zygote() -> str:
    """This worker's warm zygote, shared with the labs' kernels (a kernel would start one of its own: a second
    import of torch per lab): the socket path for their SANDBOX_WARM_SOCKET. Started, if need be, as a run would
    start it."""
    from sandbox._run.start import ranks_env

    return warm.share(ranks_env({}, gpu=False, run_dir="", owns_dir=False))


def catalogue_run(slug: str, variant: str):
    """A catalogue variant's run on its documented ranks (a VariantRun), once per test run: the first worker to ask
    runs it, and every later asker reads it, the docs build among them (it draws each bug page's broken run from
    this one; the labs' kernels too: SANDBOX_SHARED_RUNS, sandbox.bugs.shared_run)."""
    return shared_run(_shared("catalogue-runs"), registry()[slug], variant)


def docs_module(name: str):
    """docs/NAME.py, imported as the build imports it (docs/ on the path: its modules import each other so)."""
    import importlib

    docs = os.path.join(ROOT, "docs")
    if docs not in sys.path:
        sys.path.insert(0, docs)
    return importlib.import_module(name)


def execute_labs(paths, jobs: int = 2) -> list:
    """Every lab of `paths` executed (or read, if done), `jobs` at a time: the docs build needs them all."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(executed_lab, paths))


def _build_site(dest: str) -> tuple[int, str]:
    failed = [f"{os.path.basename(r['dest'])}:\n{r['stderr']}" for r in execute_labs(LABS) if r["rc"] != 0]
    if failed:  # the build would stop on these: say which lab failed, with what it printed
        return 1, "labs failed to execute:\n" + "\n".join(failed)
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", NO_COLOR="1",  # the variable quiets Material's banner
               DOCS_EXECUTED_LABS=_shared("labs-executed"), SANDBOX_SHARED_RUNS=_shared("catalogue-runs"))
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", dest], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=900)
    return p.returncode, p.stdout + p.stderr


@pytest.fixture(scope="session")
def docs_site():
    """The docs site, built once per test run with `mkdocs build --strict` from the repository root (it runs every
    bug; the labs it renders are the ones this test run executed, `executed_lab`): {"dir": where, "log": what
    mkdocs printed}. Shared by the build checks (test_docs.py) and the browser test (test_browser.py). Under xdist
    the workers share one build: the first to need it builds it under a lock in the controller's temp dir, the
    others wait for it and read it (two builds at once cost each other's CPU, and CI's time)."""
    import shutil

    need(*DOCS_PACKAGES)
    if _SHARED_TMP is None:
        dest = tempfile.mkdtemp(prefix="docs-site-")
        try:
            rc, log = _build_site(dest)
            assert rc == 0, f"mkdocs build --strict failed:\n{log[-6000:]}"
            yield {"dir": dest, "log": log}
        finally:
            shutil.rmtree(dest, ignore_errors=True)
        return
    base = _shared("docs-site-shared")
    dest, done = os.path.join(base, "site"), os.path.join(base, "build.json")
    with open(os.path.join(base, "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # bounded: the holder's build has its own 900 s limit
        if not os.path.exists(done):
            try:
                rc, log = _build_site(dest)
            except subprocess.TimeoutExpired as e:
                rc, log = -1, f"mkdocs build timed out after {e.timeout} s"
            with open(done, "w") as f:
                json.dump({"rc": rc, "log": log}, f)
        with open(done) as f:
            built = json.load(f)
    assert built["rc"] == 0, f"mkdocs build --strict failed:\n{built['log'][-6000:]}"
    yield {"dir": dest, "log": built["log"]}  # the controller removes its temp dir, and this with it, at the end


KERNEL_PACKAGES = ("jupyter_client", "ipykernel")  # a real kernel: the dev extras have them, a bare torch box may not
NOTEBOOK_PACKAGES = KERNEL_PACKAGES + ("nbformat", "nbclient")
DOCS_PACKAGES = ("mkdocs", "material", "mkdocs_jupyter") + NOTEBOOK_PACKAGES  # the build executes the labs


def need(*modules: str) -> None:
    """Skip the calling test, saying why, unless every one of these optional packages can be imported."""
    for m in modules:
        pytest.importorskip(m, reason=f"needs the optional package {m} (pip install -e '.[dev]')")


def visible_gpus() -> int:
    """GPUs this machine shows (NVML: CUDA is not initialised in the test process)."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    return torch.cuda.device_count()


# The slow tier, by what a module does: build the site, drive a browser, execute notebooks or cells in real kernels,
# check what is left behind or what a signal does at every stage, start torchrun, make simulated nodes (a test that
# asks for the two_nodes fixture, a catalogue bug across nodes), run pytest inside pytest.
# `pytest -m "not slow"` leaves them out for a quick answer while working; the README's command and CI run all.
SLOW_MODULES = {"test_docs", "test_browser", "test_labs", "test_hygiene", "test_interrupt", "test_torchrun",
                "test_kernel_zygote", "test_plugin", "test_warm", "test_readme", "test_flight_offline",
                "test_torchrun_nodes",
                # the labs' checks and the build-it-yourself solutions, each on real ranks several times over
                "test_lab_fixes_core", "test_lab_fixes_primitives", "test_course_ring", "test_course_tp_pp",
                "test_course_dp_sharding", "test_course_capstone", "test_diagrams", "test_build_it_attempts",
                "test_lab_fixes_parallel", "test_course_apis",
                # sets of programs written blind, each run several ways (the others mark themselves slow)
                "test_schedule_cases", "test_program_end", "test_hash_order_cases", "test_async_inflight_cases",
                # correct programs that run long on purpose (a false hang needs time to show)
                "test_correct_long",
                # simulated nodes (network namespaces; torchrun on them), and the cold start measured on purpose
                "test_multinode", "test_multinode_bugs", "test_node_faults", "test_fault_runs", "test_startup"}
SLOW_TESTS = {  # single tests elsewhere that start a kernel, a signal's subject or a script's, or measure at length
    # explored runs through pytester, Ctrl-C, the docs page's outputs (the quick tier keeps the rest of test_explore)
    "test_explore::test_the_pytest_marker_explores", "test_explore::test_ctrl_c_stops_every_schedule_that_is_up",
    "test_explore::test_the_docs_page_shows_what_the_runs_print",
    "test_api::test_from_a_jupyter_kernel", "test_magic::test_the_magic_in_a_notebook",
    "test_magic::test_ctrl_c_ends_the_run_and_shows_it", "test_lab::test_a_fix_typed_into_a_notebook_cell",
    "test_startup::test_the_preload_is_what_a_training_script_imports_lazily", "test_bench::test_advice_run",
    "test_contracts::test_no_warning_on_a_long_correct_data_parallel_loop",
    "test_catalogue::test_ctrl_c_while_the_ranks_start", "test_api::test_from_a_script",
    "test_lab_api::test_the_api_in_a_notebook",
    "test_lab_api::test_in_a_notebook_a_check_names_the_cell_and_the_data_dependent_if",
}


# Longest first, so that two workers end together: the labs (each executed once per run, in its own kernel, by the
# worker its test lands on: the two workers execute them side by side), then what reads the site built from them.
# The catalogue's broken variants come before the site: its build draws each bug page from the run test_catalogue
# made (`catalogue_run`), and runs itself only those not made yet (run after it, they cost the build ~55 s). All of
# these land in the first worker's share (work stealing, below, splits the tests in order at the start, and a worker
# that runs out takes from the end of the other's), the browser's tests among them: on two workers each would load
# every page. (Patterns on "module::test[params]".)
FIRST = (r"test_labs::test_lab_runs_and_shows_what_it_teaches\[.*",
         r"test_catalogue::test_variant_behaves_as_documented\[.*-broken\]", r"test_docs::.*", r"test_browser::.*")


def _rank(item) -> int:
    key = f"{item.module.__name__.rsplit('.', 1)[-1]}::{item.name}" if item.module else ""
    return next((i for i, p in enumerate(FIRST) if re.fullmatch(p, key)), len(FIRST))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """`-n N` without `--dist`: work stealing, not xdist's default `load`. `load` hands each worker a share of the
    tests up front and tops it up; on 2 workers the one holding the torchrun and node tests ran on alone for 75 s of
    an 809 s run (timed per test). With `worksteal` a worker that runs out takes half of what the other has left.
    (This runs before xdist's own hook, which would set `load`.)"""
    if getattr(config.option, "numprocesses", None) and getattr(config.option, "dist", None) == "no":
        config.option.dist = "worksteal"


def pytest_collection_modifyitems(config, items):
    """`slow` by module (above); `gpu` tests need 2 visible GPUs (one per rank), `no_gpu` tests a machine where
    none is visible; the longest first (FIRST), then the slow tier before the quick one (each in its order)."""
    from sandbox.bugs import registry

    across_nodes = {slug for slug, b in registry().items() if b.nnodes > 1}
    for item in items:
        mod = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        params = getattr(item, "callspec", None) and item.callspec.params or {}
        if mod in SLOW_MODULES or f"{mod}::{item.originalname}" in SLOW_TESTS \
                or "two_nodes" in getattr(item, "fixturenames", ()) or params.get("slug") in across_nodes:
            item.add_marker(pytest.mark.slow)  # also: whatever makes simulated nodes (namespaces, torchrun on them)
    # then, after FIRST, the slow tests before the quick ones: what xdist hands out last, as the workers drain, is
    # then the short tests, so the two end together (with torchrun's tests last, one worker ran a minute longer)
    items.sort(key=lambda item: (_rank(item), item.get_closest_marker("slow") is None))
    gpus = None
    for item in items:
        if item.get_closest_marker("gpu") or item.get_closest_marker("no_gpu"):
            gpus = visible_gpus() if gpus is None else gpus
            if item.get_closest_marker("gpu") and gpus < 2:
                item.add_marker(pytest.mark.skip(reason=f"needs 2 GPUs (NCCL, one per rank); {gpus} visible"))
            if item.get_closest_marker("no_gpu") and gpus > 0:
                item.add_marker(pytest.mark.skip(reason=f"checks a machine without GPUs; {gpus} visible"))


@contextlib.contextmanager
def kernel(env: dict, startup_timeout: float = 60):
    """(km, kc) of a fresh real Jupyter kernel (python3) that sees `env`, connected over Unix sockets
    (docs/labs_run.py, `over_unix_sockets`: a TCP port picked for a kernel can be taken by a run's connections before
    the kernel binds it); shut down and its sockets' folder removed on the way out."""
    from jupyter_client import KernelManager

    with tempfile.TemporaryDirectory(prefix="sandbox-kernel-") as folder:
        km = KernelManager(kernel_name="python3", **docs_module("labs_run").over_unix_sockets(folder))
        km.start_kernel(env=env)
        kc = km.client()
        try:
            kc.start_channels()
            kc.wait_for_ready(timeout=startup_timeout)
            yield km, kc
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def execute_notebook(nb, path: str, timeout: float, env: dict | None = None):
    """`nb` executed in place in a fresh real kernel (python3) whose working directory is `path`, over Unix sockets
    as `kernel` above; raises on any cell that ends in an error."""
    from nbclient import NotebookClient
    from traitlets.config import Config

    with tempfile.TemporaryDirectory(prefix="sandbox-kernel-") as folder:
        NotebookClient(nb, kernel_name="python3", timeout=timeout, resources={"metadata": {"path": path}},
                       config=Config(KernelManager=docs_module("labs_run").over_unix_sockets(folder))).execute(
                           **({"env": env} if env is not None else {}))
    return nb


def run_in_kernel(code: str, timeout: float = 120) -> str:
    """Execute `code` in a fresh real Jupyter kernel (tests/ and the project importable), shut it down, and return
    what it printed; fails if the cell raised. Skips where the kernel packages are not installed."""
    need(*KERNEL_PACKAGES)
    with kernel(dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.path.dirname(__file__))) as (km, kc):
        out = []
        reply = kc.execute_interactive(code, timeout=timeout, output_hook=out.append)
        assert reply["content"]["status"] == "ok", reply["content"]
        return "".join(m["content"].get("text", "") for m in out if m["msg_type"] == "stream")


@pytest.fixture(scope="module")
def product_seeds():
    """The product's number of hash seeds for this module's runs (the suite runs with one, above). The worker's warm
    zygote, started with one, starts a sibling for the second seed at the first run that asks for two, and keeps it
    (it was restarted before and after each such module: about 3 starts of an interpreter importing torch each)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("SANDBOX_HASH_SEEDS", raising=False)
        yield
