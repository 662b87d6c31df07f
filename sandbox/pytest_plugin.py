"""A pytest plugin (installed with the package, entry point `sandbox`): a test function marked

    @pytest.mark.sandbox(world_size=4)
    def test_all_reduce_sums():
        t = torch.ones(2) * dist.get_rank()
        dist.all_reduce(t)
        assert t.tolist() == [6.0, 6.0]

runs its body on every one of N sandbox ranks (real gloo, or NCCL with `gpu=True`), the default process group
already made and destroyed after it (`init=False` if the body makes its own). The test fails with the sandbox's
report, not a timeout, when a rank hangs, crashes or raises: which rank, in which call, at which line, and why.

Marker options: world_size (default 2), init (True), backend ("gloo"), gpu (False), hang_after and timeout
(`sandbox.defaults`: 1 s and 300 s), strict (fail on contract warnings; `--sandbox-strict` turns it on for every
marked test), explore (K: the body runs again under K schedules a cluster could give it, `sandbox.explore`, and the
test fails with the first that fails and the seed that replays it). Several simulated nodes take torchrun's names:
`@pytest.mark.sandbox(nnodes=2, nproc_per_node=2)` runs 4 ranks, two in each node (its own hostname and address:
node0, node1; LOCAL_RANK counted per node), as `python -m sandbox.run --nnodes 2 --nproc-per-node 2`; world_size
then is not given (it means one node). Nodes need root: elsewhere such a test fails with the one sentence that says
so. To skip it there instead, give it a fixture that calls `pytest.skip(why)` when `sandbox.nodes.available()`
returns `(False, why)`: not a skipif at the module's top, which every rank would run again (the ranks import the
test's file).

The test's fixture values are sent to the ranks (they must pickle); what a rank's body returns is ignored. A
failing assert on a rank says what it compared (`assert 6.0 == 4.0`), as pytest's own asserts do: the
ranks run the test file as pytest rewrote it.

PyTorch's own MultiProcessTestCase (torch/testing/_internal/common_distributed.py) spawns a process per rank for
each test and reports a hung rank only at its timeout; benchmarks/pytest_plugin.py compares the two.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types

import pytest

from sandbox import branches, defaults

_OPTIONS = {"world_size": 2, "init": True, "backend": None, "gpu": False, "hang_after": defaults.HANG_AFTER_S,
            "timeout": defaults.RUN_TIMEOUT_S, "strict": None, "nnodes": 1, "nproc_per_node": None, "explore": None}


def pytest_addoption(parser):
    parser.addoption("--sandbox-strict", action="store_true",
                     help="sandbox-marked tests fail when their run broke a contract (a warning), even if it finished")


def pytest_configure(config):
    options = ", ".join(f"{k}={v!r}" for k, v in _OPTIONS.items())
    config.addinivalue_line("markers", f"sandbox({options}): run the test's body on every rank of a sandbox run "
                                       "(dist-sandbox)")


def _options(marker) -> dict:
    unknown = set(marker.kwargs) - set(_OPTIONS)
    if unknown or len(marker.args) > 1:
        pytest.fail(f"@pytest.mark.sandbox takes world_size and {', '.join(list(_OPTIONS)[1:])}; not "
                    f"{', '.join(sorted(unknown)) or 'more than one positional argument'}.", pytrace=False)
    opts = {**_OPTIONS, **marker.kwargs}
    if marker.args:
        opts["world_size"] = marker.args[0]
    several = opts["nnodes"] != 1 or opts["nproc_per_node"] is not None
    if several and ("world_size" in marker.kwargs or marker.args):  # as `python -m sandbox.run` refuses -n with them
        pytest.fail("@pytest.mark.sandbox: world_size is the number of ranks on one node: with nnodes give "
                    "nproc_per_node instead.", pytrace=False)
    if several:
        per = opts["nproc_per_node"] if opts["nproc_per_node"] is not None else 1  # torchrun's default
        for name, v in (("nnodes", opts["nnodes"]), ("nproc_per_node", per)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                pytest.fail(f"@pytest.mark.sandbox: {name} must be a whole number of at least 1, not {v!r}.",
                            pytrace=False)
        opts["world_size"] = opts["nnodes"] * per
    del opts["nproc_per_node"]
    return opts


class _Rewritten:
    """The test function as the ranks must get it: with the asserts pytest rewrote to say what they compared
    (`assert 6.0 == 4.0`). Imported by name in the ranks, the test file would not be rewritten (pytest's import
    hook lives in this process only) and a failing assert would say just `AssertionError`; cloudpickle would carry
    the rewritten code but drops its file name, and with it every call site and traceback line. So launch sends
    this stand-in by value (it has no module to be imported from), and unpickling it where the ranks are forked
    imports the test's file with pytest's rewriting and gives back the test function itself: no frame of ours
    stands between the rank and the test."""

    def __init__(self, fn):
        self.fn = fn
        func = getattr(fn, "__func__", fn)
        self.__module__ = None  # not importable by name: launch pickles it, and __reduce__ says how
        self.__qualname__ = func.__qualname__
        self.spec = (func.__module__, getattr(sys.modules.get(func.__module__), "__file__", None), func.__qualname__,
                     func is not fn)

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __reduce__(self):
        return _rebuild, self.spec


def _rebuild(module: str, path: str | None, qualname: str, method: bool):
    """In the process that forks the ranks: the test module run afresh with its asserts rewritten by pytest's own
    rewriter (as pytest imports it), and the test function (a method bound to a fresh instance) from it."""
    mod = _import_rewritten(module, path)
    *outer, name = qualname.split(".")
    owner = mod
    for part in outer:
        owner = getattr(owner, part)
    fn = getattr(owner, name)
    return types.MethodType(fn, owner()) if method else fn  # pytest too makes an instance for each test


def _import_rewritten(module: str, path: str | None):
    """The module `module` from the file `path`, its asserts rewritten as pytest's import hook would."""
    if not path or not path.endswith(".py") or not os.path.isfile(path):  # no source to rewrite: plain import
        return importlib.import_module(module)
    from _pytest.assertion.rewrite import rewrite_asserts

    if "." in module:  # a test package's module: its package first, for its relative imports
        importlib.import_module(module.rpartition(".")[0])
    with open(path, "rb") as f:
        source = f.read()
    tree = branches.parse(source, path)
    rewrite_asserts(tree, source, path)
    spec = importlib.util.spec_from_file_location(module, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod  # as an import does: pickled values of its classes find it
    exec(compile(tree, path, "exec", dont_inherit=True), mod.__dict__)
    return mod


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    marker = pyfuncitem.get_closest_marker("sandbox")
    if marker is None:
        return None
    from sandbox.launcher import UsageError, launch

    opts = _options(marker)
    strict = opts.pop("strict")
    if strict is None:
        strict = pyfuncitem.config.getoption("sandbox_strict")
    fn = pyfuncitem.obj
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    rewrite = pyfuncitem.config.getoption("assertmode", "rewrite") == "rewrite"  # not under --assert=plain
    if rewrite and "<locals>" not in getattr(fn, "__qualname__", "<locals>"):  # a function its module names
        fn = _Rewritten(fn)
    k = opts.pop("explore")
    try:
        if k is None:
            res = launch(fn, kwargs=kwargs, world_size=opts.pop("world_size"), **opts)
        else:  # explore=K: the body under K schedules a cluster could give it (sandbox.explore)
            found = launch(fn, kwargs=kwargs, world_size=opts.pop("world_size"), explore=k, **opts)
            if not found.ok:
                pytest.fail(f"sandbox: {found}", pytrace=False)
            res = found.baseline
    except UsageError as e:  # one line, even where the sentence quotes a command's own output
        pytest.fail(f"@pytest.mark.sandbox: {' '.join(str(e).split())}", pytrace=False)
    if res.verdict != "ok":  # the report's first line is its headline: "sandbox: HANG [...]", once
        pytest.fail(f"sandbox: {res.text(logs=True)}", pytrace=False)
    if strict and res.warnings:
        from sandbox.report import text  # the headline says FAILED (strict: ...), as the command line's does

        pytest.fail(f"sandbox: the run finished but broke a contract ({len(res.warnings)} warning"
                    f"{'s' if len(res.warnings) > 1 else ''})\n\n{text.render(res, logs=True, strict=True)}",
                    pytrace=False)
    return True
