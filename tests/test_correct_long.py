"""Correct long-running programs must end OK, never as a false HANG.

Each script in tests/data/correct_long/ is a correct distributed program (it
checks its own results and raises if one is wrong) whose shape could fool a
faulty hang judge: thousands of tiny collectives, mixed ops, point-to-point
ping-pong, a slow-but-progressing straggler, lots of output, several groups,
object collectives, async ops, 4 ranks. The number of ranks is the script's
`# ranks: N` line. Each is run as a user would: `python -m sandbox.run -n N`.
"""
import re
from pathlib import Path

import pytest
from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "correct_long"
SCRIPTS = sorted(DATA.glob("*.py"))
TIMEOUT_S = 120


def ranks_of(script: Path) -> int:
    m = re.search(r"^# ranks: (\d+)\s*$", script.read_text(), re.M)
    assert m, f"{script} has no '# ranks: N' line"
    return int(m.group(1))


def run_sandbox(script: Path, timeout: float = TIMEOUT_S):
    """Run one script under the sandbox as `python -m sandbox.run -n N` (answered in-process by its main, which
    bounds the run with --timeout); return (exit code, combined output)."""
    p = run_cli("sandbox.run", "-n", str(ranks_of(script)), "--timeout", str(int(timeout) - 10),
                str(script.relative_to(ROOT)), env={"NO_COLOR": "1"})
    return p.returncode, p.stdout + p.stderr


def headline(out: str) -> str:
    for line in out.splitlines():
        if re.match(r"^(OK|HANG|ERROR|CRASH|TIMEOUT|INTERRUPTED|FAIL)\b", line):
            return line
    return next((l for l in out.splitlines() if l.strip()), "(no output)")


def test_scripts_found():
    assert len(SCRIPTS) >= 6, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_correct_long_program_ends_ok(script):
    rc, out = run_sandbox(script)
    msg = f"{script.name}: exit code {rc}, headline {headline(out)!r}\n--- full output ---\n{out}"
    assert rc == 0, msg
    assert re.search(r"^OK: \d+ ranks in ", out, re.M), msg
