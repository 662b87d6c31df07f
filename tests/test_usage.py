"""What a new user tripped on, held by tests: the commands as the README shows them, their whole output read.

--strict says why it exits 1; a script (or a cell) that does not compile is one SyntaxError, as Python prints it,
before any rank starts; the cell magic names its file `<cell>` everywhere, contract warnings included; -v lines
say when they happened; --stacks prints the stacks of the ranks the sandbox ended; every command's messages carry
one prefix, its name."""
import json
import os
import re
import subprocess

import pytest

from conftest import ROOT, python, run_cli
from sandbox import magic
from sandbox.result import Outcome, Verdict

EX = os.path.join(ROOT, "examples")

# finishes, but leaves the default process group undestroyed: a contract warning (not_destroyed) and verdict OK
UNDESTROYED = 'import torch.distributed as dist\ndist.init_process_group("gloo")\ndist.barrier()\n'
NOT_PYTHON = "import torch\nx = 1\nif x\n    print(x)\n"


def test_strict_says_why_it_exits_1(tmp_path, clean):
    script = tmp_path / "undestroyed.py"
    script.write_text(UNDESTROYED)
    strict = run_cli("sandbox.run", "-n", "2", "--strict", str(script), env={"NO_COLOR": "1"})
    assert strict.returncode == 1, strict.stdout + strict.stderr
    lines = strict.stdout.strip().splitlines()
    # the run itself was fine, but the command fails: the headline says so, never OK
    assert lines[0].startswith("FAILED (strict: 1 contract warning): 2 ranks in"), strict.stdout
    assert lines[1] == "All 2 ranks finished.", strict.stdout
    assert "Warning [not_destroyed]" in strict.stdout
    assert lines[-1] == "--strict: 1 contract warning, exit code 1", strict.stdout  # ...and this is why it is 1
    plain = run_cli("sandbox.run", "-n", "2", str(script), env={"NO_COLOR": "1"})
    assert plain.returncode == 0 and plain.stdout.startswith("OK: 2 ranks in") and "Warning [not_destroyed]" in \
        plain.stdout
    assert "--strict" not in plain.stdout  # without --strict the warning changes nothing, and nothing says it does


def test_a_script_that_does_not_compile_is_one_syntax_error_before_any_rank(tmp_path, clean):
    script = tmp_path / "typo.py"
    script.write_text(NOT_PYTHON)
    p = run_cli("sandbox.run", "-n", "3", "-v", str(script))
    assert p.returncode == 1
    assert p.stdout == ""
    own = subprocess.run([python(), str(script)], capture_output=True, text=True, timeout=60)
    assert own.returncode == 1 and "SyntaxError: expected ':'" in own.stderr
    assert p.stderr == own.stderr  # exactly what Python says: its file and line, once, no frame of the sandbox
    assert f'File "{script}", line 3' in p.stderr and "zygote" not in p.stderr  # -v: no rank was ever started


def test_a_module_that_does_not_compile_is_one_syntax_error_too(tmp_path, clean):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(NOT_PYTHON)
    p = run_cli("sandbox.run", "-n", "2", "-v", "-m", "pkg.train", cwd=str(tmp_path))
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.startswith(f'  File "{tmp_path / "pkg" / "train.py"}", line 3\n'), p.stderr
    assert p.stderr.count("SyntaxError: expected ':'") == 1 and "zygote" not in p.stderr


def test_a_cell_that_does_not_compile_is_one_syntax_error_at_the_cells_line(capsys, monkeypatch):
    def no_run(*args, **kwargs):
        raise AssertionError("a rank was started for a cell that does not compile")

    monkeypatch.setattr("sandbox.launcher.run_script", no_run)
    assert magic.run_cell("-n 4", NOT_PYTHON) is None
    err = capsys.readouterr().err
    assert err.startswith('  File "<cell>", line 4\n'), err  # the %%sandbox line is line 1 of the cell
    assert err.count("SyntaxError: expected ':'") == 1 and "sandbox" not in err


def test_the_cell_is_named_cell_everywhere_warnings_included(capsys, clean):
    res = magic.run_cell("-n 2", UNDESTROYED)
    shown = capsys.readouterr().out
    assert res.verdict is Verdict.OK and all(r.outcome is Outcome.OK for r in res.ranks)  # still the enums
    [w] = res.warnings
    assert w.kind == "not_destroyed" and "initialised at <cell>:3" in w.summary, w.summary
    assert w.sites == {0: "<cell>:3", 1: "<cell>:3"}
    everything = json.dumps(res.to_dict(events=True)) + shown
    assert "<cell>:3" in shown and "sandbox-cell-" not in everything and "cell.py" not in everything


def test_verbose_lines_say_when_they_happened(clean):
    # cold, as a user runs it: the lines name the zygote started
    p = run_cli("sandbox.run", "-n", "2", "-v", os.path.join(EX, "allreduce.py"), env={"SANDBOX_WARM": "0"})
    assert p.returncode == 0, p.stderr
    ours = [line for line in p.stderr.splitlines() if line.startswith("sandbox:")]
    assert any("zygote started" in line for line in ours), p.stderr
    times = []
    for line in ours:
        m = re.fullmatch(r"sandbox: \+(\d+\.\d{3}) s \S.*", line)
        assert m, line
        times.append(float(m.group(1)))
    assert times == sorted(times) and 0 < times[-1] < 120  # seconds since the command started, in order


def test_stacks_prints_every_hung_ranks_stack_after_the_report(clean):
    p = run_cli("sandbox.run", "-n", "4", "--stacks", os.path.join(EX, "mismatch.py"), env={"NO_COLOR": "1"})
    assert p.returncode == 1
    out = p.stdout
    assert out.startswith("HANG [collective_mismatch]: 4 ranks")
    blocks = re.split(r"\n(?=rank \d \(hung)", out)
    report, stacks = blocks[0], blocks[1:]
    assert "its Python stack" not in report and len(stacks) == 4, out
    for rank, block in enumerate(stacks):
        op = "broadcast" if rank == 2 else "all_reduce"
        assert block.startswith(f"rank {rank} (hung in {op}"), block
        assert re.search(r'mismatch\.py", line \d+ in step', block), block  # where the user's code waits
    without = run_cli("sandbox.run", "-n", "4", os.path.join(EX, "mismatch.py"))
    assert without.returncode == 1 and "its Python stack" not in without.stdout


@pytest.mark.parametrize("command", ["run", "repro", "diagnose", "bench"])
def test_every_command_heads_its_messages_with_its_name(command):
    p = run_cli(f"sandbox.{command}", "--no-such-option")
    assert p.returncode == 2
    assert p.stderr.startswith(f"sandbox.{command}: "), p.stderr
    assert "python -m" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_run_s_own_messages_have_the_same_prefix_as_its_parser_s(tmp_path):
    usage = run_cli("sandbox.run", "-n", "0", "x.py")
    missing = run_cli("sandbox.run", "-n", "2", str(tmp_path / "missing.py"))
    assert usage.returncode == missing.returncode == 2
    assert usage.stderr.startswith("sandbox.run: argument -n/--nproc"), usage.stderr
    assert missing.stderr.startswith("sandbox.run: no such script"), missing.stderr
