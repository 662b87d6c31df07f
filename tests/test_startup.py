"""Start-up of real training scripts: the zygote can import, once, what such a script imports lazily after `import
torch, torch.distributed` (measured: `torch._dynamo`, from DDP's constructor and the first optimizer step), so the
ranks do not each pay for it; importing it starts no thread, so forking after it is safe; a job that does not need it
does not pay for it; and SANDBOX_PRELOAD=0 turns it off."""
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, run_cli
from sandbox import preload

# the DDP script benchmarks/core.py times (a tiny model, an optimizer, a DataLoader with a DistributedSampler,
# backward, step, torch.save of a state_dict), saying first whether the preload is in place
_spec = importlib.util.spec_from_file_location("bench_core", os.path.join(ROOT, "benchmarks", "core.py"))
_core = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_core)
DDP_SCRIPT = _core.DDP_JOB.replace(
    'dist.init_process_group("gloo")\n',
    'import sys\nprint("PRELOADED", "torch._dynamo" in sys.modules, flush=True)  # before its first DDP and optimizer\n'
    'dist.init_process_group("gloo")\n', 1)
assert "PRELOADED" in DDP_SCRIPT, "benchmarks/core.py's DDP_JOB no longer starts its group as this test expects"

# in one plain process: what the script imports after torch and torch.distributed, with or without the preload
# imported first, and whether the preload started a thread (OS threads included, not only Python's)
MEASURE = textwrap.dedent("""\
    import json, os, runpy, socket, sys, threading
    import torch, torch.distributed
    from sandbox import preload
    tasks = len(os.listdir("/proc/self/task"))
    if sys.argv[2] == "preload":
        preload.run()
    after_preload = {"threads": threading.active_count(), "tasks": len(os.listdir("/proc/self/task")),
                     "tasks_before": tasks}
    before = set(sys.modules)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    runpy.run_path(sys.argv[1], run_name="__main__")
    after_preload["imported"] = sorted(set(sys.modules) - before)
    print("MEASURED", json.dumps(after_preload))
""")


def _measure(tmp_path, mode: str) -> dict:
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    p = subprocess.run([sys.executable, "-c", MEASURE, str(script), mode], capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES=""))
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(x for x in p.stdout.splitlines() if x.startswith("MEASURED "))
    return json.loads(line.removeprefix("MEASURED "))


def test_the_preload_is_what_a_training_script_imports_lazily(tmp_path):
    """The measurement behind PRELOAD, repeated: without it the script imports hundreds of modules (torch._dynamo
    among them); with it, next to none. A torch that moves its lazy imports elsewhere fails this."""
    cold = _measure(tmp_path, "plain")
    assert "torch._dynamo" in cold["imported"]
    assert len(cold["imported"]) > 300, cold["imported"]
    warm = _measure(tmp_path, "preload")
    assert not set(preload.PRELOAD) & set(warm["imported"])
    assert len(warm["imported"]) <= 0.05 * len(cold["imported"]), warm["imported"]
    # forking after the preload is as safe as after `import torch`: it started no thread
    assert warm["threads"] == 1
    assert warm["tasks"] == warm["tasks_before"]


def _preloaded_lines(p) -> list[str]:
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    d = json.loads(p.stdout)
    assert d["verdict"] == "ok", d["diagnosis"]
    return [line.split("PRELOADED ", 1)[1].strip() for r in d["ranks"] for line in r["output"].splitlines()
            if "PRELOADED " in line]


OPTIMIZER_SCRIPT = textwrap.dedent("""\
    import sys
    import torch
    import torch.distributed as dist

    print("PRELOADED", "torch." + "_dyn" + "amo" in sys.modules, flush=True)  # before the first optimizer
    dist.init_process_group("gloo")
    w = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.SGD([w], lr=0.1)
    (w * 2).sum().backward()
    dist.all_reduce(w.grad)
    opt.step()
    dist.barrier()
    dist.destroy_process_group()
""")


def test_a_rank_finds_the_preload_before_its_first_optimizer(tmp_path, clean):
    script = tmp_path / "train.py"
    script.write_text(OPTIMIZER_SCRIPT)
    p = run_cli("sandbox.run", "-n", "2", "--json", str(script), env={"SANDBOX_WARM": "0"})
    assert _preloaded_lines(p) == ["True", "True"]


def test_no_preload_when_turned_off(tmp_path, clean):
    """The twin: the same script with SANDBOX_PRELOAD=0 finds nothing preloaded."""
    script = tmp_path / "train.py"
    script.write_text(OPTIMIZER_SCRIPT)
    p = run_cli("sandbox.run", "-n", "2", "--json", str(script), env={"SANDBOX_WARM": "0", "SANDBOX_PRELOAD": "0"})
    assert _preloaded_lines(p) == ["False", "False"]


def test_a_job_that_needs_no_preload_does_not_pay_for_it(tmp_path, clean):
    """Asked to preload, the zygote still preloads nothing for a job that mentions no optimizer, DDP or compile."""
    script = tmp_path / "trivial.py"
    # the module's name is put together at run time: written out, it would itself ask for the preload
    script.write_text("import sys\nimport torch.distributed as dist\n"
                      "print('PRELOADED', 'torch.' + '_dyn' + 'amo' in sys.modules, flush=True)\n"
                      "dist.init_process_group('gloo')\ndist.barrier()\ndist.destroy_process_group()\n")
    p = run_cli("sandbox.run", "-n", "2", "--json", str(script), env={"SANDBOX_WARM": "0", "SANDBOX_PRELOAD": "1"})
    assert _preloaded_lines(p) == ["False", "False"]


@pytest.mark.parametrize("source, needs", [
    (b"opt = torch.optim.Adam(model.parameters())", True),
    (b"from torch import optim\n", True),
    (b"model = DistributedDataParallel(model)", True),
    (b"model = torch.compile(model)", True),
    (b"optimizer = make()\npattern = re.compile('x')\n", False),  # names that only look alike
    (b"dist.all_reduce(t)\n", False),
])
def test_what_needs_the_preload(tmp_path, source, needs):
    script = tmp_path / "job.py"
    script.write_bytes(source)
    assert preload.needed({"kind": "script", "path": str(script)}) is needs
    assert preload.needed({"kind": "func", "fn_bytes": pickle.dumps(source.decode())}) is needs


@pytest.mark.parametrize("source, imports", [
    (b"import pytest\n", True),
    (b"import os, pytest\n", True),
    (b"import os, pytest as pt\n", True),
    (b"    from pytest import fixture\n", True),
    (b"import pytest_asyncio\n", False),
    (b"import os  # pytest\n", False),
    (b"from sandbox import pytest_plugin\n", False),
    (b"import mypkg.pytest\n", False),
    (b"x = 'import pytest'\n", False),
])
def test_which_libraries_a_run_s_code_imports(tmp_path, source, imports):
    script = tmp_path / "job.py"
    script.write_bytes(source)
    assert preload.libraries({"kind": "script", "path": str(script)}) == (["pytest"] if imports else [])


def test_a_modules_source_is_read_without_importing_it(tmp_path, monkeypatch):
    pkg = tmp_path / "jobpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('imported before the fork')\n")
    (pkg / "train.py").write_text("import torch\nopt = torch.optim.SGD([], lr=1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert preload.needed({"kind": "module", "name": "jobpkg.train"})
    assert preload.needed({"kind": "func", "module": "jobpkg.train", "qualname": "f"})
    assert not preload.needed({"kind": "module", "name": "jobpkg"})
    assert not preload.needed({"kind": "module", "name": "no_such_module_anywhere"})
    assert "jobpkg" not in sys.modules


def test_a_catalogue_run_reads_its_bug_module_for_the_preload():
    """A catalogue run's target is the small runner sandbox.bugs._entry; the code is its bug module, named in the
    run's preload list: a DDP bug preloads, a raw all_gather one does not."""
    runner = {"kind": "func", "module": "sandbox.bugs._entry", "qualname": "run"}
    assert not preload.needed(runner)
    assert preload.needed(runner, ["sandbox.bugs.ddp_uneven_inputs"])
    assert not preload.needed(runner, ["sandbox.bugs.gather_uneven"])
