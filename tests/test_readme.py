"""The outputs the README and the docs pages show are pasted from real runs, and stay true: each example shown with
its output is run again here, and what it prints now must say what the page says.

The comparison is the one a reader makes, on the stable parts of a report, as the catalogue's docstrings are held:
the headline's verdict, kind and number of ranks (not its time), every row of the rank table, the diagnosis word for
word (wrapped lines joined, times left out), and the ranks' own output lines. `test_a_changed_line_fails` shows
that each of those parts, changed in the page, makes the comparison fail.
"""
from __future__ import annotations

import os
import re

import pytest
from conftest import ROOT, run_cli, run_in_kernel

README = os.path.join(ROOT, "README.md")
TOOLBOX = os.path.join(ROOT, "docs", "toolbox.md")

HEADLINE = re.compile(r"^(OK|HANG|ERROR|CRASH|TIMEOUT|INTERRUPTED)\b.*: \d+ ranks?")
TIME = re.compile(r"\d+(\.\d+)? s\b")  # a duration, which differs run to run


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def block_after(text: str, marker: str) -> str:
    """The first code block (fenced, or indented by 4 spaces) after the line that contains `marker`."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if marker in line), None)
    assert start is not None, f"no line with {marker!r}"
    i = start + 1
    while i < len(lines) and not (lines[i].startswith("```") or lines[i].startswith("    ")):
        i += 1
    assert i < len(lines), f"no code block after {marker!r}"
    if lines[i].startswith("```"):
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        return "\n".join(lines[i + 1:end])
    block = []
    while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
        block.append(lines[i][4:])
        i += 1
    return "\n".join(block).strip("\n")


def parts(report: str) -> dict:
    """The stable parts of a terminal report, wherever the layout puts them: the headline (less its time), the rank
    table's rows (cells), the diagnosis (every other line before the ranks' output, joined, times left out), and the
    ranks' output lines (those that start with `[rank N]`: a wrapped line's continuation is left out)."""
    lines = [line.rstrip() for line in report.splitlines()]
    head = next((i for i, line in enumerate(lines) if HEADLINE.match(line)), None)
    assert head is not None, f"no headline in:\n{report}"
    first_output = next((i for i, line in enumerate(lines) if line.startswith("[rank ")), len(lines))
    rows, said, in_table = [], [], False
    for line in lines[head + 1:first_output]:
        if re.match(r"rank\s+outcome\b", line):
            in_table = True
        elif in_table and line.strip():
            rows.append(re.split(r"\s{2,}", line.strip()))
        else:
            in_table = False
            said.append(line)
    return {"headline": HEADLINE.match(lines[head]).group(0), "rows": rows,
            "diagnosis": TIME.sub("<time>", " ".join(" ".join(said).split())),
            "output": [line for line in lines[first_output:] if line.startswith("[rank ")]}


def differences(shown: str, printed: str) -> list[str]:
    """What the page shows that the run did not print, part by part; [] when they agree."""
    want, got = parts(shown), parts(printed)
    return [f"{key}: the page shows {want[key]!r}, the run printed {got[key]!r}"
            for key in ("headline", "rows", "diagnosis", "output") if want[key] != got[key]]


# Each output block of the README is found by a phrase of the line that introduces it.
MISMATCH = "What you see for `examples/mismatch.py`"
JUPYTER_OUT = "`print(_sandbox)` in the next cell"
WHERE = "What `examples/where.py` prints on two nodes"
KILLED = "What the node killed mid-training comes to"
# the commands those two blocks show, as the tests run them (the README shows them with .venv/bin/python)
WHERE_ARGS = ("--nnodes", "2", "--nproc-per-node", "2", "examples/where.py")
KILLED_ARGS = ("--launcher", "torchrun", "--nnodes", "2", "--nproc-per-node", "2", "--max-restarts", "1",
               "--kill-node", "1@rank2:10", "examples/checkpointed.py")


@pytest.fixture(scope="module")
def mismatch_run() -> str:
    """`python -m sandbox.run -n 4 examples/mismatch.py` as the README shows it, NO_COLOR=1."""
    p = run_cli("sandbox.run", "-n", "4", "examples/mismatch.py", env={"NO_COLOR": "1"}, timeout=300)
    assert p.returncode == 1, p.stdout + p.stderr  # the README: exit code 1, the run hung
    return p.stdout


def test_readme_command_and_its_output_are_shown():
    text = _read(README)
    assert ".venv/bin/python -m sandbox.run -n 4 examples/mismatch.py" in text
    assert "NO_COLOR=1" in text.split(MISMATCH, 1)[1].splitlines()[0]


def test_readme_mismatch_output_is_what_the_run_prints(mismatch_run):
    assert differences(block_after(_read(README), MISMATCH), mismatch_run) == []


def test_toolbox_quotes_a_real_branch_sentence(mismatch_run):
    """docs/toolbox.md quotes the sentence that names a collective reached through a rank-dependent `if`."""
    quoted = re.search(r'\("(Rank \d+ reached [^"]+)", from `examples/mismatch.py`\)', _read(TOOLBOX))
    assert quoted, "docs/toolbox.md no longer quotes the mismatch example's branch sentence"
    assert " ".join(quoted.group(1).split()) in parts(mismatch_run)["diagnosis"]


def _jupyter_cell(text: str) -> tuple[str, str]:
    """The README's `%%sandbox` cell: its option line and its body."""
    cells = re.findall(r"```\n(%%sandbox.*?)```", text, re.S)
    assert len(cells) == 1, f"expected one %%sandbox cell in the README, found {len(cells)}"
    line, body = cells[0].split("\n", 1)
    return line[len("%%sandbox"):].strip(), body


def test_readme_jupyter_example_says_what_the_cell_shows():
    """The cell runs through the real magic in a real kernel; `print(_sandbox)` is what the README pastes."""
    text = _read(README)
    assert differences(block_after(text, JUPYTER_OUT), _jupyter_printed(text)) == []


SHOWN = """\
HANG [collective_mismatch]: 4 ranks in 1.97 s
rank  outcome  pending call                   site
0     hung     all_reduce #1 on [0, 1, 2, 3]  examples/mismatch.py:11
1     hung     broadcast #1 on [0, 1, 2, 3]   examples/mismatch.py:9

Collective mismatch at call #1 of group [0, 1]: rank 0 calls all_reduce; rank 1 calls broadcast. It took
0.11 s.

[rank 0] step 0
[rank 1] step 0
"""


@pytest.mark.parametrize("change", [
    ("HANG [collective_mismatch]", "HANG [missing_ranks]"),
    ("HANG [collective_mismatch]: 4 ranks", "ERROR [collective_mismatch]: 4 ranks"),
    (": 4 ranks in", ": 2 ranks in"),
    ("1     hung     broadcast #1 on [0, 1, 2, 3]   examples/mismatch.py:9",
     "1     hung     broadcast #1 on [0, 1, 2, 3]   examples/mismatch.py:8"),
    ("0     hung", "0     error"),
    ("rank 1 calls broadcast", "rank 2 calls broadcast"),
    ("[rank 1] step 0", "[rank 1] step 1"),
])
def test_a_changed_line_fails(change):
    """The comparison rejects a page that differs from the run in any stable part, and ignores only the times."""
    old, new = change
    assert old in SHOWN
    assert differences(SHOWN, SHOWN) == []
    assert differences(SHOWN.replace("1.97 s", "2.41 s").replace("0.11 s", "0.09 s"), SHOWN) == []
    assert differences(SHOWN.replace(old, new, 1), SHOWN) != []


def _nodes_ok() -> tuple[bool, str]:
    from sandbox import nodes

    return nodes.available()


@pytest.mark.parametrize("marker, args", [
    (WHERE, WHERE_ARGS), pytest.param(KILLED, KILLED_ARGS, marks=pytest.mark.slow)])
def test_readme_several_nodes_outputs_are_what_the_runs_print(clean, marker, args):
    ok, why = _nodes_ok()
    if not ok:
        pytest.skip(why)
    text = _read(README)
    assert ".venv/bin/python -m sandbox.run " + " ".join(args) in text
    p = run_cli("sandbox.run", *args, env={"NO_COLOR": "1"}, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    # what may differ run to run: the cluster's subnet (the first free one on the machine), the call rank 2 had
    # reached when the sandbox saw the kill due (it reads the traces every tenth of a second), and the step a
    # restarted worker resumes at (where the kill landed against rank 0's last checkpoint)
    same = [(r"10\.213\.\d+\.", "10.213.S."), (r"entered its call \d+", "entered its call K"),
            (r"starting at step \d+", "starting at step N")]

    def stable(text: str) -> str:
        for pattern, to in same:
            text = re.sub(pattern, to, text)
        return text
    assert differences(stable(block_after(text, marker)), stable(p.stdout)) == []


def _jupyter_printed(text: str) -> str:
    line, body = _jupyter_cell(text)
    printed = run_in_kernel(
        "get_ipython().run_line_magic('load_ext', 'sandbox')\n"
        f"get_ipython().run_cell_magic('sandbox', {line!r}, {body!r})\n"
        "print('=== the result ===')\n"
        "print(_sandbox)\n", timeout=300)
    return printed.split("=== the result ===", 1)[1]


def _replace_block(lines: list[str], marker: str, new: str) -> list[str]:
    """`lines` with the code block after `marker` replaced by `new` (kept fenced or indented, as it was)."""
    i = next(k for k, line in enumerate(lines) if marker in line) + 1
    while not (lines[i].startswith("```") or lines[i].startswith("    ")):
        i += 1
    if lines[i].startswith("```"):
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        return lines[:i + 1] + new.splitlines() + lines[end:]
    end = i
    while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
        end += 1
    while not lines[end - 1].strip():
        end -= 1
    return lines[:i] + [("    " + line) if line else "" for line in new.splitlines()] + lines[end:]


def paste() -> None:
    """Rerun the README's examples and paste what they print now into README.md (after a deliberate change of the
    report): `python tests/test_readme.py --paste`, then read the diff."""
    import subprocess
    import sys
    import textwrap

    p = subprocess.run([sys.executable, "-m", "sandbox.run", "-n", "4", "examples/mismatch.py"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, NO_COLOR="1"))
    text = _read(README)
    outputs = {MISMATCH: p.stdout, JUPYTER_OUT: _jupyter_printed(text)}
    for marker, args in ((WHERE, WHERE_ARGS), (KILLED, KILLED_ARGS)):  # as root only: simulated nodes
        if _nodes_ok()[0]:
            outputs[marker] = subprocess.run([sys.executable, "-m", "sandbox.run", *args], cwd=ROOT,
                                             capture_output=True, text=True, timeout=300,
                                             env=dict(os.environ, NO_COLOR="1")).stdout
    lines = text.splitlines()
    for marker, out in outputs.items():
        out = [line.rstrip() for line in out.strip("\n").splitlines()]
        assert not any("Traceback" in line for line in out), "\n".join(out)  # a broken run is not an example
        # the notebook's text does not wrap its lines; wrap them as the terminal does, for the page
        out = [wrapped for line in out for wrapped in (
            textwrap.wrap(line, 118, break_long_words=False, break_on_hyphens=False) if len(line) > 118 else [line])]
        lines = _replace_block(lines, marker, "\n".join(out))
    with open(README, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--paste"]:
        sys.exit("usage: python tests/test_readme.py --paste  (reruns the README's examples and pastes their output)")
    paste()
