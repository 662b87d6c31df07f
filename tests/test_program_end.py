"""A rank's program ends as the same script ends under plain `python`, as far as anything outside the process can
see (sandbox/ending.py): its non-daemon threads finish, executors never shut down let their workers go, atexit
handlers run, the files it left open are flushed, and then the rank exits at once. The cases in
tests/data/program_end/ were written from the behaviour alone (plain Python's), by someone who had not read the
sandbox's code; each runs under plain python (the reference), under `sandbox.run -n 2` and under
`python -m sandbox.trace` (the torchrun entry), and every rank's files must equal the reference's, byte for byte."""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import threading
import time

import pytest
from conftest import ROOT, run_cli

from sandbox import launch

CASES = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "program_end", "*.py")))


def _files(d: str, rank: int) -> dict:
    """{name with the rank taken out: bytes} of rank `rank`'s files in d."""
    out = {}
    for name in sorted(os.listdir(d)):
        if f"rank{rank}" in name:
            with open(os.path.join(d, name), "rb") as f:
                out[name.replace(f"rank{rank}", "rank<R>")] = f.read()
    return out


def _reference(script: str, tmp_path) -> tuple[int, dict]:
    d = tmp_path / "python"
    d.mkdir()
    env = dict(os.environ, OUT_DIR=str(d), RANK="0")
    p = subprocess.run([sys.executable, script], env=env, cwd=tmp_path, capture_output=True, timeout=60)
    return p.returncode, _files(str(d), 0)


@pytest.mark.parametrize("script", CASES, ids=[os.path.basename(c)[:-3] for c in CASES])
def test_a_sandbox_rank_ends_as_python_ends(script, tmp_path, clean):
    code, want = _reference(script, tmp_path)
    d = tmp_path / "sandbox"
    d.mkdir()
    p = run_cli("sandbox.run", "-n", "2", "--timeout", "30", script, env={"OUT_DIR": str(d)}, cwd=str(tmp_path))
    assert "TIMEOUT" not in p.stdout, p.stdout + p.stderr
    assert (p.returncode == 0) == (code == 0), p.stdout + p.stderr
    assert [_files(str(d), r) for r in range(2)] == [want, want], p.stdout + p.stderr


@pytest.mark.parametrize("script", CASES, ids=[os.path.basename(c)[:-3] for c in CASES])
def test_a_torchrun_worker_ends_as_python_ends(script, tmp_path):
    """`python -m sandbox.trace`, what torchrun's workers run, as one worker (the entry is the same under torchrun;
    tests/test_torchrun.py runs it there)."""
    code, want = _reference(script, tmp_path)
    d = tmp_path / "worker"
    d.mkdir()
    env = dict(os.environ, OUT_DIR=str(d), RANK="0", WORLD_SIZE="1", PYTHONPATH=ROOT)
    p = subprocess.run([sys.executable, "-m", "sandbox.trace", "--trace-dir", str(tmp_path / "traces"), script],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == code, p.stdout + p.stderr
    assert _files(str(d), 0) == want, p.stdout + p.stderr


def _late_writer(path: str) -> None:
    time.sleep(0.3)
    with open(path, "w") as f:
        f.write("done\n")


def starts_a_thread(out: str) -> int:
    """A function run by launch() that leaves a non-daemon thread working when it returns."""
    rank = int(os.environ["RANK"])
    threading.Thread(target=_late_writer, args=(os.path.join(out, f"thread-{rank}"),)).start()
    return rank


def test_a_launched_function_s_threads_finish_before_its_rank_ends(tmp_path, clean):
    res = launch(starts_a_thread, world_size=2, args=(str(tmp_path),))
    assert res.verdict == "ok", res.diagnosis.summary
    assert res.values == [0, 1]
    assert sorted(os.listdir(tmp_path)) == ["thread-0", "thread-1"]
