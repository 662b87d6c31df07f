"""Scripts written blind by a helper that had not read the sandbox (tests/data/main_guard), from the classic mistake
of multiprocessing's spawn: the ranks import the script that defines their function, so a launch at the script's
top level (bare, in a main() called bare, in a loop over world sizes, with explore) runs again on that import. It
once did: runs within runs, unseen, or a confusing "could not start: No module named '__sandbox_main__'" with a
run directory left in /tmp. Now a run started there is refused, whichever door it comes through (the check is in
the lifecycle both launchers share), and the launch the user made raises UsageError with one sentence: put the call
under `if __name__ == "__main__":`. The guarded scripts (a function of the script, or imported from a module beside
it) still run. Each script runs as a user runs it, `python script.py`,
its launches forked from this worker's warm zygote; nothing of the sandbox's is left after any of them."""
import concurrent.futures
import glob
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, leftovers, shared_zygote
from sandbox import warm

pytestmark = pytest.mark.slow  # a Python process per script

CASES = os.path.join(os.path.dirname(__file__), "data", "main_guard")
SCRIPTS = sorted(p for p in glob.glob(os.path.join(CASES, "*.py")) if re.search(r"^# expect:", open(p).read(), re.M))
SENTENCE = re.compile(r"UsageError: a run was started at the top level of (\S+), which the ranks import to find "
                      r"the function they run: put that call under `if __name__ == \"__main__\":`\.")


def expect(path: str) -> str:
    return re.search(r"^# expect: (\w+)", open(path).read(), re.M).group(1)


def sandbox_dirs() -> set:
    return set(glob.glob("/tmp/sandbox-run-*"))


@pytest.fixture(scope="module")
def runs():
    env = dict(os.environ, PYTHONPATH=ROOT, **{warm.SHARE_ENV: shared_zygote()})
    before = sandbox_dirs()

    def run(path):
        return subprocess.run([sys.executable, path], cwd=CASES, env=env, capture_output=True, text=True, timeout=180)

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        done = dict(zip(SCRIPTS, pool.map(run, SCRIPTS)))
    assert leftovers() == [] and sandbox_dirs() - before == set()
    return done


def test_the_set_is_there():
    kinds = [expect(p) for p in SCRIPTS]
    assert kinds.count("guard") >= 4 and kinds.count("ok") >= 2, SCRIPTS


@pytest.mark.parametrize("path", [p for p in SCRIPTS if expect(p) == "guard"], ids=os.path.basename)
def test_a_launch_at_the_top_level_is_refused_with_the_sentence(runs, path):
    p = runs[path]
    said = SENTENCE.findall(p.stderr)
    assert p.returncode != 0 and said and said[-1] == path, p.stdout + p.stderr
    assert "RESULT ok=True" not in p.stdout


@pytest.mark.parametrize("path", [p for p in SCRIPTS if expect(p) == "ok"], ids=os.path.basename)
def test_a_guarded_script_runs(runs, path):
    p = runs[path]
    assert p.returncode == 0 and p.stdout.rstrip().endswith("RESULT ok=True"), p.stdout + p.stderr
