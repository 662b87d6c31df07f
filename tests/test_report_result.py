"""Results are plain frozen data: enums for verdicts and outcomes that serialise as the strings the JSON contract
documents, no field changed after a result is built, nothing drawn (or imported for drawing) until asked; and a hung
rank's stack holds the user's frames only."""
import dataclasses
import json
import os
import re
import subprocess
import sys
import sysconfig

import pytest

import scenarios
from conftest import ROOT
from sandbox import _paths, launch
from sandbox.result import Diagnosis, Outcome, RankResult, RunResult, Verdict, user_stack

FRAME = re.compile(r'\s+File "(.+)", line (\d+) in (\S+)')


def _frames(stack: str) -> list[tuple[str, int, str]]:
    return [(m.group(1), int(m.group(2)), m.group(3)) for line in stack.splitlines() if (m := FRAME.match(line))]


def _result() -> RunResult:
    ranks = [RankResult(rank=0, outcome="ok", exit_code=0, output="hi\n", pid=11),
             RankResult(rank=1, outcome="hung", pending={"op": "send", "peer": 0}, stack="s", pid=12)]
    return RunResult(verdict="hang", world_size=2, wall_s=1.23456, diagnosis=Diagnosis(kind="p2p_cycle", cause="c."),
                     ranks=ranks, pgid=10)


def test_verdicts_and_outcomes_are_enums_that_serialise_as_the_documented_strings():
    res = _result()
    assert res.verdict is Verdict.HANG and res.ranks[1].outcome is Outcome.HUNG and res.verdict == "hang"
    d = res.to_dict()
    assert d == {"verdict": "hang", "world_size": 2, "wall_s": 1.235, "pgid": 10, "warnings": [],
                 "diagnosis": {"kind": "p2p_cycle", "summary": "c.", "culprit_ranks": [], "op": None, "group": None,
                               "seq": None, "site": None, "details": {}},
                 "ranks": [{"rank": 0, "outcome": "ok", "exit_code": 0, "pending": None, "error": None, "pid": 11,
                            "stack": None, "output": "hi\n", "host": None},
                           {"rank": 1, "outcome": "hung", "exit_code": None, "pending": {"op": "send", "peer": 0},
                            "error": None, "pid": 12, "stack": "s", "output": "", "host": None}]}
    assert type(d["verdict"]) is str and type(d["ranks"][1]["outcome"]) is str  # plain JSON, no enum inside
    assert json.loads(json.dumps(d)) == d
    assert res.headline() == "HANG [p2p_cycle]: 2 ranks in 1.23 s"


def test_a_verdict_or_outcome_outside_the_set_is_refused():
    with pytest.raises(ValueError, match="'hanging' is not a valid Verdict"):
        dataclasses.replace(_result(), verdict="hanging")
    with pytest.raises(ValueError, match="'finished' is not a valid Outcome"):
        RankResult(rank=0, outcome="finished")


def test_a_result_is_never_changed_after_it_is_built():
    res = _result()
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.verdict = "ok"
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.ranks[0].outcome = "error"
    changed = dataclasses.replace(res, verdict="ok")  # a changed copy is how
    assert changed.ok and not res.ok


def test_the_data_imports_no_drawing_until_it_is_drawn():
    code = ("import sys, sandbox.result as r\n"
            "drawing = lambda: sorted(m for m in sys.modules if m.startswith(('sandbox.report', 'sandbox.htmlview',"
            " 'rich', 'matplotlib')))\n"
            "print(drawing())\n"
            "res = r.RunResult(verdict='ok', world_size=1, wall_s=1.0, ranks=[r.RankResult(rank=0, outcome='ok')],"
            " diagnosis=r.Diagnosis(kind='none', cause='All 1 ranks finished.'))\n"
            "str(res)\n"
            "print(drawing())\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    before, after = p.stdout.splitlines()
    assert before == "[]"
    assert "sandbox.report.text" in after  # the twin: the check sees the renderer once a result is drawn


# ------------------------------------------------------------------------------------------------ hung stacks
def test_a_hung_rank_s_stack_holds_the_user_s_frames_only(clean, tmp_path):
    res = launch(scenarios.send_cycle, world_size=2, trace_dir=str(tmp_path))
    assert res.verdict == "hang" and res.diagnosis.kind == "p2p_cycle", res.text()
    for r in res.ranks:
        raw = open(tmp_path / f"stack-{r.rank}.txt").read()
        # the twin: the dump itself holds the sandbox's frames
        assert any(_paths.is_plumbing(f) for f, _, _ in _frames(raw))
        frames = _frames(res.to_dict()["ranks"][r.rank]["stack"])
        assert frames and not any(_paths.is_plumbing(f) for f, _, _ in frames), r.stack
        top = frames[0]
        assert top[0].endswith(os.path.join("tests", "scenarios.py")) and top[2] == "send_cycle", r.stack
        assert r.stack.startswith("Current thread 0x") or r.stack.startswith("Thread 0x"), r.stack


STDLIB = sysconfig.get_paths()["stdlib"]  # this machine's: how the filter tells the standard library
DUMP = f"""Thread 0x00007f0000000002 (most recent call first):
  File "{STDLIB}/threading.py", line 320 in wait
  File "/srv/other/site-packages/sandbox/trace/inflight.py", line 40 in _watch
  File "{STDLIB}/threading.py", line 975 in run

Current thread 0x00007f0000000001 (most recent call first):
  File "/srv/other/site-packages/sandbox/trace/ops.py", line 575 in wait
  File "/srv/other/site-packages/torch/distributed/distributed_c10d.py", line 2753 in send
  File "/home/me/sandbox/train.py", line 7 in step
  File "{STDLIB}/contextlib.py", line 81 in inner
  File "/home/me/sandbox/train.py", line 20 in <module>
  File "/srv/other/site-packages/sandbox/rank.py", line 123 in _run
  File "<frozen runpy>", line 88 in _run_code
"""


def test_the_stack_filter_keeps_user_frames_and_drops_sandbox_threads():
    kept = user_stack(DUMP)
    assert kept == ("Current thread 0x00007f0000000001 (most recent call first):\n"
                    '  File "/home/me/sandbox/train.py", line 7 in step\n'
                    f'  File "{STDLIB}/contextlib.py", line 81 in inner\n'
                    '  File "/home/me/sandbox/train.py", line 20 in <module>\n')


def test_a_stack_with_no_user_frame_is_kept_whole():
    only_sandbox = DUMP.split("\n\n")[0] + "\n"  # the sandbox itself hung: its frames are all there is
    assert user_stack(only_sandbox) == only_sandbox
    assert user_stack(None) is None and user_stack("") == ""


def test_results_are_built_by_keyword_only():
    with pytest.raises(TypeError, match="positional"):
        RankResult(0, "ok")
    with pytest.raises(TypeError, match="positional"):
        RunResult("ok", 1, 1.0, Diagnosis(kind="none", cause="fine"), [])
