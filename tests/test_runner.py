"""The catalogue's runner (`sandbox.bugs.run_variant`) and `python -m sandbox.repro --all` over it, on real ranks.

The two bugs here are registered for these tests only, and both run this module's `broken` and `fixed` (the ranks
import it by name, as they import a catalogue module): `misdocumented` says its broken variant hangs, and it does
not (it finishes); `documented` says what they do. With `misdocumented` first and `documented` last, the run that is
not as documented comes early and the last one is fine: `--all` must fail for it all the same.
"""
import json

import pytest
import torch
import torch.distributed as dist
from conftest import run_cli

from sandbox import repro
from sandbox.bugs import Bug, Expect, init, run_variant


def finishes():
    """Every rank takes part in one all_reduce and returns the sum."""
    init()
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return t.item()


def rank_1_raises():
    init()
    if dist.get_rank() == 1:
        raise ValueError("rank 1 has nothing to send")
    dist.all_reduce(torch.ones(1))


broken = fixed = finishes  # both variants of both bugs


def reference(world_size):
    return float(world_size)


MISDOCUMENTED = Bug(slug="misdocumented", title="says it hangs, finishes", source="tests/test_runner.py",
                    symptom="none", world_size=2, broken=Expect("hang", "p2p_cycle"), fixed=Expect("ok"),
                    module=__name__)
DOCUMENTED = Bug(slug="documented", title="does what it says", source="tests/test_runner.py", symptom="none",
                 world_size=2, broken=Expect("ok"), fixed=Expect("ok", matches_reference=True), module=__name__)


@pytest.fixture
def catalogue(monkeypatch):
    """`python -m sandbox.repro`'s catalogue replaced by the given bugs."""
    def use(*bugs):
        monkeypatch.setattr(repro, "registry", lambda: {b.slug: b for b in bugs})
    return use


def _run_all(argv, capsys):
    code = repro.main(["--all", *argv])
    return code, capsys.readouterr().out


def test_all_fails_when_an_early_variant_is_not_as_documented(catalogue, capsys, clean):
    catalogue(MISDOCUMENTED, DOCUMENTED)
    code, out = _run_all([], capsys)
    lines = out.splitlines()
    assert code == 1, out
    assert lines[0].startswith(f"{'misdocumented':22} broken  OK: 2 ranks in "), out
    assert lines[0].endswith("NOT as documented: verdict ok, expected hang; diagnosis none, expected p2p_cycle"), out
    assert [line.split()[-1] for line in lines[1:4]] == ["documented"] * 3, out  # the rest: as documented
    assert lines[-1].startswith("3/4 variants as documented in "), out


def test_all_passes_when_every_variant_is_as_documented(catalogue, capsys, clean):
    catalogue(DOCUMENTED)
    code, out = _run_all(["--json"], capsys)
    d = json.loads(out)
    assert code == 0 and d["as_documented"] is True, out
    assert [(r["bug"], r["variant"], r["as_documented"]) for r in d["runs"]] == [
        ("documented", "broken", True), ("documented", "fixed", True)]


def test_all_as_json_fails_for_an_early_variant_too(catalogue, capsys, clean):
    catalogue(MISDOCUMENTED, DOCUMENTED)
    code, out = _run_all(["--json", "--variant", "broken"], capsys)
    d = json.loads(out)
    assert code == 1 and d["as_documented"] is False
    assert [(r["bug"], r["as_documented"]) for r in d["runs"]] == [("misdocumented", False), ("documented", True)]
    assert d["runs"][0]["why_not"][0] == "verdict ok, expected hang"


def test_run_variant_runs_a_fix_in_place_of_the_modules_own(clean):
    """A learner's fix runs as the fixed variant, held to its expectation and its reference: one that raises is not
    as documented, one that returns the reference is."""
    ran = run_variant(DOCUMENTED, "fixed", 2, fix=rank_1_raises)
    assert not ran.as_documented and ran.result.verdict == "error"
    assert ran.why_not == ["verdict error, expected ok"]
    ran = run_variant(DOCUMENTED, "fixed", 2, fix=finishes)
    assert ran.as_documented, ran.why_not
    assert ran.result.ranks[0].value == {"value": 2.0, "reference": 2.0}


def test_a_variant_is_broken_or_fixed():
    with pytest.raises(ValueError, match="'broken' or 'fixed', not 'sideways'"):
        run_variant(DOCUMENTED, "sideways", 2)


def test_repro_refuses_a_timeline_it_could_not_save_before_the_run(tmp_path):
    """`--timeline` (sandbox.cli.picture_path): a folder that does not exist, or a name that is no picture, is one
    sentence and exit 2 before any rank runs."""
    for bad, says in ((tmp_path / "missing" / "t.png", "does not exist"), (tmp_path / "t.txt", "wants a .png")):
        p = run_cli("sandbox.repro", "kv-sync", "--timeline", str(bad))
        assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
        assert says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
