"""The bug catalogue: every variant of every bug behaves as its module documents (real gloo ranks), plus the
`python -m sandbox.repro` CLI."""
import json
import re

import pytest

from conftest import run_cli
from sandbox.bugs import registry
from sandbox.repro import explanation, run_variant

BUGS = registry()
CASES = [(slug, v) for slug, b in BUGS.items() if b.needs != "gpu" for v in ("broken", "fixed")]


def test_catalogue_has_the_documented_bugs():
    documented = {"init-port", "group-order", "xpu-device-id", "aux-data", "kv-sync", "cross-device",
                  "resample-desync"}
    assert documented <= set(BUGS)
    assert len(set(BUGS) - documented) >= 2  # and pitfalls of the primitives themselves
    for b in BUGS.values():
        assert b.needs in ("cpu", "gpu", "simulated")
        assert 1 <= b.min_world_size <= b.world_size
        for part in ("Symptom:", "Root cause:", "Fix:", "Run: python -m sandbox.repro " + b.slug):
            assert part in b.doc, f"{b.slug}: docstring lacks {part!r}"
        assert "(pasted" not in b.doc, f"{b.slug}: the Run section has no real output yet"
        assert explanation(b.doc).startswith("Symptom:")


@pytest.mark.parametrize("slug,variant", CASES, ids=[f"{s}-{v}" for s, v in CASES])
def test_variant_behaves_as_documented(slug, variant, clean):
    bug = BUGS[slug]
    res, ok, why = run_variant(bug, variant, bug.world_size)
    assert ok, f"{slug} {variant}: {why}\n{res.diagnosis.summary}"
    if variant == "fixed":
        assert res.verdict == "ok"
    else:
        assert res.verdict != "ok"  # a broken variant always shows its symptom


def test_the_check_can_fail(clean):
    """A fixed variant judged against its broken expectation must be rejected."""
    bug = BUGS["kv-sync"]
    res, ok, _ = run_variant(bug, "fixed", bug.world_size)
    assert ok
    from sandbox.bugs import check
    ok2, why = check(bug, bug.broken, res)
    assert not ok2 and any("verdict ok" in w for w in why)


def test_repro_cli_list_and_usage():
    p = run_cli("sandbox.repro", "--list", "--json")
    assert p.returncode == 0
    listed = {b["slug"] for b in json.loads(p.stdout)}
    assert listed == set(BUGS)
    p = run_cli("sandbox.repro", "--list")
    assert p.returncode == 0 and "kv-sync" in p.stdout and "simulated" in p.stdout
    p = run_cli("sandbox.repro", "no-such-bug")
    assert p.returncode == 2 and "kv-sync" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("sandbox.repro", "aux-data", "-n", "2")
    assert p.returncode == 2 and "at least 4" in p.stderr
    p = run_cli("sandbox.repro", "kv-sync", "--variant", "sideways")
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_repro_cli_run_json_and_explanation(clean):
    p = run_cli("sandbox.repro", "kv-sync", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["as_documented"] is True
    assert [v["variant"] for v in d["variants"]] == ["broken", "fixed"]
    assert d["variants"][0]["result"]["diagnosis"]["kind"] == "p2p_cycle"
    assert "send waits for" in d["explanation"] or "does not return until the peer" in d["explanation"]
    p = run_cli("sandbox.repro", "group-order", "--variant", "broken")
    assert p.returncode == 0
    assert re.search(r"HANG \[group_mismatch\]", p.stdout) and "as documented" in p.stdout
    assert "Root cause:" in p.stdout


def test_repro_debug_detail_shows_torchs_own_report(clean):
    p = run_cli("sandbox.repro", "resample-desync", "--variant", "broken", "--debug", "detail", "--json")
    d = json.loads(p.stdout)
    assert p.returncode == 0, d
    res = d["variants"][0]["result"]
    assert res["diagnosis"]["kind"] == "collective_mismatch"
    text = " ".join((r["error"] or {}).get("message", "") + r["output"] for r in res["ranks"])
    assert "mismatch" in text.lower()  # PyTorch's own fingerprint check spoke too
