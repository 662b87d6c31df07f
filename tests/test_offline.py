"""`python -m sandbox.diagnose DIR`: the same judge as a live run, the trace format's version checked, and a
clean command line (one sentence on bad input, no warning from Python)."""
import json
import os
import shutil

import pytest

import scenarios
from conftest import ROOT, run_cli
from sandbox import launch
from sandbox.diagnose.__main__ import load_result

TRACES = os.path.join(ROOT, "tests", "traces")

LIVE = [(scenarios.op_mismatch, 3), (scenarios.send_cycle, 2), (scenarios.missing_rank, 3),
        (scenarios.groups_cycle, 3),
        (scenarios.exit_code, 3), (scenarios.exit_code_while_a_peer_waits, 3), (scenarios.raises, 3),
        (scenarios.ok_sum, 2)]


@pytest.mark.parametrize("fn,n", LIVE, ids=[f.__name__ for f, _ in LIVE])
def test_live_and_offline_diagnoses_of_one_run_are_equal(fn, n, tmp_path, clean):
    live = launch(fn, world_size=n, trace_dir=str(tmp_path), timeout=30)
    with open(tmp_path / "meta.json") as f:
        assert json.load(f)["version"] == 1
    off = load_result(str(tmp_path))
    a, b = live.diagnosis, off.diagnosis
    assert (off.verdict, b.kind, b.culprit_ranks, b.op, b.group, b.seq, b.site) == (
        live.verdict, a.kind, a.culprit_ranks, a.op, a.group, a.seq, a.site), (a.summary, b.summary)
    assert [r.outcome for r in off.ranks] == [r.outcome for r in live.ranks]


def test_a_trace_dir_of_another_format_version_is_refused(tmp_path):
    d = tmp_path / "traces"
    shutil.copytree(os.path.join(TRACES, "send_cycle"), d)
    (d / "meta.json").write_text('{"format": "dist-sandbox-trace", "version": 99}')
    p = run_cli("sandbox.diagnose", str(d))
    assert p.returncode == 2
    assert "format version 99" in p.stderr and "reads version 1" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_diagnose_prints_no_runpy_warning():
    p = run_cli("sandbox.diagnose", os.path.join(TRACES, "send_cycle"), env={"NO_COLOR": "1"})
    assert p.returncode == 1
    assert p.stdout.startswith("HANG [p2p_cycle]")
    assert "RuntimeWarning" not in p.stderr and p.stderr == ""
