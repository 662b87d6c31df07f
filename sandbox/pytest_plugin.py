"""A pytest plugin (installed with the package, entry point `sandbox`): a test function marked

    @pytest.mark.sandbox(world_size=4)
    def test_all_reduce_sums():
        t = torch.ones(2) * dist.get_rank()
        dist.all_reduce(t)
        assert t.tolist() == [6.0, 6.0]

runs its body on every one of N sandbox ranks (real gloo, or NCCL with `gpu=True`), the default process group
already made and destroyed after it (`init=False` if the body makes its own). The test fails with the sandbox's
report, not a timeout, when a rank hangs, crashes or raises: which rank, in which call, at which line, and why.

Marker options: world_size (default 2), init (True), backend ("gloo"), gpu (False), hang_after (1 s), timeout
(120 s), strict (fail on contract warnings; `--sandbox-strict` turns it on for every marked test). The test's
fixture values are sent to the ranks (they must pickle); what a rank's body returns is ignored.

PyTorch's own MultiProcessTestCase (torch/testing/_internal/common_distributed.py) spawns a process per rank for
each test and reports a hung rank only at its timeout; benchmarks/pytest_plugin.py compares the two.
"""
from __future__ import annotations

import pytest

_OPTIONS = {"world_size": 2, "init": True, "backend": None, "gpu": False, "hang_after": 1.0, "timeout": 120.0,
            "strict": None}


def pytest_addoption(parser):
    parser.addoption("--sandbox-strict", action="store_true",
                     help="sandbox-marked tests fail when their run broke a contract (a warning), even if it finished")


def pytest_configure(config):
    config.addinivalue_line("markers", "sandbox(world_size=2, init=True, backend=None, gpu=False, hang_after=1.0, "
                                       "timeout=120.0, strict=None): run the test's body on every rank of a sandbox "
                                       "run (dist-sandbox)")


def _options(marker) -> dict:
    unknown = set(marker.kwargs) - set(_OPTIONS)
    if unknown or len(marker.args) > 1:
        pytest.fail(f"@pytest.mark.sandbox takes world_size and {', '.join(list(_OPTIONS)[1:])}; not "
                    f"{', '.join(sorted(unknown)) or 'more than one positional argument'}.", pytrace=False)
    opts = {**_OPTIONS, **marker.kwargs}
    if marker.args:
        opts["world_size"] = marker.args[0]
    return opts


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
    try:
        res = launch(fn, kwargs=kwargs, world_size=opts.pop("world_size"), **opts)
    except UsageError as e:
        pytest.fail(f"@pytest.mark.sandbox: {e}", pytrace=False)
    if res.verdict != "ok":
        pytest.fail(f"sandbox: {res.headline()}\n\n{res.text(logs=True)}", pytrace=False)
    if strict and res.warnings:
        pytest.fail(f"sandbox: the run finished but broke a contract ({len(res.warnings)} warning"
                    f"{'s' if len(res.warnings) > 1 else ''})\n\n{res.text(logs=True)}", pytrace=False)
    return True
