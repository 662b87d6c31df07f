"""Executing a lab: `labs/NN_name.ipynb` (committed without outputs) run top to bottom in a real Jupyter kernel of
this interpreter, as a learner would run it, into an executed copy. One way for both readers of the copies: the docs
build (docs/hooks.py), which renders them, and the tests (tests/test_labs.py), which check what they show. A test
session executes each lab once and hands its copies to the build (`DOCS_EXECUTED_LABS`, tests/conftest.py), so a
lab costs one run per session, not two.

Only the standard library and, in the executing subprocess, nbformat and nbclient: the tests import this where
mkdocs is not installed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LABS_DIR = os.path.join(ROOT, "labs")
CELL_TIMEOUT_S = 120  # the executor's limit per cell; a lab is meant to take 60 s or less in all on 2 cores
LAB_TIMEOUT_S = 900
KERNEL = "dist-sandbox-labs"
COLUMNS = "110"

_CODE = (
    "import sys, tempfile, nbformat\n"
    "from nbclient import NotebookClient\n"
    "from traitlets.config import Config\n"
    "src, dest, kernel, cwd, timeout, here = sys.argv[1:7]\n"
    "sys.path.insert(0, here)\n"
    "from labs_run import over_unix_sockets\n"
    "nb = nbformat.read(src, as_version=4)\n"
    "with tempfile.TemporaryDirectory(prefix='sandbox-kernel-') as d:\n"
    "    NotebookClient(nb, timeout=int(timeout), kernel_name=kernel, allow_errors=False,\n"
    "                   config=Config(KernelManager=over_unix_sockets(d)),\n"
    "                   resources={'metadata': {'path': cwd}}).execute()\n"
    "nbformat.write(nb, dest)\n")


def over_unix_sockets(folder: str) -> dict:
    """A Jupyter kernel manager's settings that connect it to its kernel over Unix sockets in `folder`, not TCP
    ports. Over TCP, jupyter_client picks five free ports (binding port 0 and letting go) and the kernel binds them
    a moment later; in between, any process may take one: a run's ranks open many connections, and a kernel that
    lost that race dies with "Address already in use" (the client then waits 60 s for it). A Unix socket's name is
    the kernel's own."""
    return {"transport": "ipc", "ip": os.path.join(folder, "kernel")}


def env() -> dict:
    """What a lab's kernel (and the docs build's runs) see: no colour codes in the rendered output, a fixed width."""
    e = dict(os.environ, NO_COLOR="1", COLUMNS=COLUMNS, PYTHONUNBUFFERED="1")
    e["PATH"] = os.path.dirname(sys.executable) + os.pathsep + e.get("PATH", "")
    e.pop("FORCE_COLOR", None)
    return e


def kernelspec(folder: str) -> str:
    """A kernelspec for this interpreter in `folder` (put on JUPYTER_PATH by `execute`): the venv's `python3` spec
    says just `python`, whatever is first on PATH. Returns the folder to put on JUPYTER_PATH."""
    jupyter = os.path.join(folder, "jupyter")
    spec = os.path.join(jupyter, "kernels", KERNEL)
    os.makedirs(spec, exist_ok=True)
    with open(os.path.join(spec, "kernel.json"), "w") as f:
        json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                   "display_name": "dist-sandbox labs", "language": "python"}, f)
    return jupyter


def execute(path: str, dest: str, jupyter_path: str, extra_env: dict | None = None) -> dict:
    """Execute one lab into `dest`, in its own kernel (in a subprocess, so several can run at once), with
    `extra_env` added to its environment. Once: a lab that fails is a lab to fix, not to run again. {"rc", "dest",
    "stderr", "seconds"}."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    e = dict(env(), **(extra_env or {}))
    e["JUPYTER_PATH"] = os.pathsep.join(filter(None, [jupyter_path, e.get("JUPYTER_PATH")]))
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-c", _CODE, path, dest, KERNEL, LABS_DIR, str(CELL_TIMEOUT_S),
                            os.path.dirname(os.path.abspath(__file__))],
                           cwd=LABS_DIR, env=e, capture_output=True, text=True, timeout=LAB_TIMEOUT_S)
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired as x:  # the executor's per-cell limit failed to end it: say so, as a failure
        said = x.stderr or b""
        rc, err = -9, f"(killed after {x.timeout:g} s) " + (said.decode(errors="replace")
                                                            if isinstance(said, bytes) else said)
    return {"rc": rc, "dest": dest, "stderr": err[-3000:], "seconds": time.monotonic() - t0}
