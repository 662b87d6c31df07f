"""Small things a new user meets (issue 28, part 6), each held without starting ranks:

- under strict (`--strict`, `strict=True`), a run that finished but broke a contract fails, and its headline says
  FAILED, never OK, in every renderer;
- `python -m sandbox.diagnose DIR` on Flight Recorder dumps where one rank's dump is empty (it died writing it)
  diagnoses from the dumps there are and says whose dump cannot be read; a directory where none can be read is one
  sentence and exit code 2;
- the site's search lists an error message's own page first for the short form a person types too, not only for the
  message pasted whole (the browser test types them: tests/test_browser.py).
"""
import io
import json
import os
import pickle
import sys

import pytest

from conftest import ROOT
from sandbox import flight
from sandbox.contracts import ContractWarning
from sandbox.diagnose.__main__ import load_result
from sandbox.diagnose.__main__ import main as diagnose_main
from sandbox.report import html, model, terminal, text
from sandbox.result import Diagnosis, RankResult, RunResult

# ------------------------------------------------------------------------------------------ strict: never OK


def _finished(warnings: int) -> RunResult:
    """A run where both ranks finished, with `warnings` contract warnings."""
    w = ContractWarning("not_destroyed", "Ranks 0 and 1 exited without destroying the default process group "
                        "(initialised at job.py:2).", [0, 1], op="destroy_process_group",
                        sites={0: "job.py:2", 1: "job.py:2"})
    return RunResult(verdict="ok", world_size=2, wall_s=3.04, diagnosis=Diagnosis(kind="none", cause="All 2 ranks"
                     " finished."), ranks=[RankResult(rank=r, outcome="ok", exit_code=0) for r in (0, 1)],
                     warnings=[w] * warnings)


def test_under_strict_a_run_that_broke_a_contract_is_never_headed_ok():
    res = _finished(1)
    assert text.render(res).splitlines()[0] == "OK: 2 ranks in 3.04 s"  # without strict the warning fails nothing
    said = text.render(res, strict=True).splitlines()
    assert said[:2] == ["FAILED (strict: 1 contract warning): 2 ranks in 3.04 s", "All 2 ranks finished."], said
    out = io.StringIO()
    terminal.print_result(res, file=out, strict=True)
    assert out.getvalue().startswith("FAILED (strict: 1 contract warning): 2 ranks in 3.04 s\n"), out.getvalue()
    rep = model.build(res, strict=True)
    assert (rep.ok, rep.colour) == (False, model.RED)  # red, as a failure is, where OK is green
    assert "FAILED (strict: 1 contract warning)" in html.draw(rep) and model.RED in html.draw(rep)


def test_strict_changes_nothing_where_there_is_no_warning_or_the_run_failed_anyway():
    assert model.headline(_finished(0), strict=True) == "OK: 2 ranks in 3.04 s"
    assert model.headline(_finished(2), strict=True) == "FAILED (strict: 2 contract warnings): 2 ranks in 3.04 s"
    hung = RunResult(verdict="hang", world_size=2, wall_s=1.5, diagnosis=Diagnosis(kind="p2p_cycle", cause="c."),
                     ranks=[RankResult(rank=r, outcome="hung") for r in (0, 1)], warnings=_finished(1).warnings)
    assert model.headline(hung, strict=True) == "HANG [p2p_cycle]: 2 ranks in 1.50 s"


# ------------------------------------------------------------------------------------------ a dump that cannot be read

def _entry(seq: int, state: str, path: str, line: int) -> dict:
    """One all_reduce of the default group as torch's Flight Recorder writes it (format 2.x)."""
    return {"record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": "gloo:all_reduce", "time_created_ns": seq * 10**9,
            "input_sizes": [[4]], "input_dtypes": ["Float"], "output_sizes": [[4]], "output_dtypes": ["Float"],
            "state": state, "frames": [{"filename": path, "name": "<module>", "line": line}], "is_p2p": False}


def _dumps(tmp_path, broken: dict[int, bytes]) -> str:
    """A directory of a 3-rank job's dumps (torch's names): every rank made all_reduce #1 at job.py:7 and waits in
    all_reduce #2 at job.py:8; the ranks of `broken` left these bytes instead of their dump."""
    d = tmp_path / "dumps"
    d.mkdir()
    job = str(tmp_path / "job.py")
    for r in range(3):
        dump = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}},
                "pg_status": {"0": {"last_enqueued_collective": 2, "last_started_collective": 2,
                                    "last_completed_collective": 1}},
                "entries": [_entry(1, "completed", job, 7), _entry(2, "scheduled", job, 8)]}
        (d / f"{flight.PREFIX}{r}").write_bytes(broken.get(r, pickle.dumps(dump)))
    return str(d)


def _diagnose(directory: str, capsys) -> tuple[int, dict | None, str]:
    """`python -m sandbox.diagnose --json DIR`, in this process: (exit code, its JSON or None, stderr)."""
    code = diagnose_main(["--json", directory])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else None, err


def test_an_empty_dump_is_named_and_the_others_are_diagnosed(tmp_path, capsys):
    """Rank 2 died writing its dump (0 bytes): the diagnosis is made from ranks 0 and 1's, and says whose dump
    could not be read, and why, as it says whose is missing."""
    code, j, err = _diagnose(_dumps(tmp_path, {2: b""}), capsys)
    assert code == 1 and err == "" and j["world_size"] == 3, (code, err)
    said = j["diagnosis"]["summary"]
    assert f"Rank 2's dump cannot be read: {flight.PREFIX}2 is empty (0 bytes)" in said, said
    assert "this diagnosis is made from the dumps there are" in said, said
    assert [(r["rank"], (r["pending"] or {}).get("seq")) for r in j["ranks"][:2]] == [(0, 2), (1, 2)], j["ranks"]
    assert all(r["pending"]["site"].endswith("job.py:8") for r in j["ranks"][:2]), j["ranks"]


def test_every_unreadable_dump_is_named_with_what_is_wrong_with_it(tmp_path):
    res = load_result(_dumps(tmp_path, {1: b"", 2: b"\x80\x04 torn"}))
    said = res.diagnosis.summary
    assert (f"The dumps of ranks 1 and 2 cannot be read: {flight.PREFIX}1 is empty (0 bytes);"
            f" {flight.PREFIX}2 is not a Flight Recorder dump (neither a pickle nor JSON)") in said, said
    assert res.ranks[0].pending["seq"] == 2, res.ranks[0]


def test_a_directory_where_no_dump_can_be_read_is_one_sentence_and_exit_code_2(tmp_path, capsys):
    d = _dumps(tmp_path, {0: b"", 1: b"", 2: b"not a dump"})
    code, j, err = _diagnose(d, capsys)
    assert (code, j) == (2, None), err
    assert err.count("\n") == 1 and err.startswith("sandbox.diagnose: ") and "Traceback" not in err, err
    assert f"none of the 3 files named {flight.PREFIX}<N> in {d} can be read as a Flight Recorder dump" in err, err


# ------------------------------------------------------------------------------------------ search: the short form

def _error_pages():
    pytest.importorskip("yaml", reason="the docs' front matter is YAML (pyyaml, with the docs packages)")
    sys.path.insert(0, os.path.join(ROOT, "docs"))
    import error_pages  # docs/error_pages.py, as the docs build and the browser test read it

    return error_pages


def test_the_short_form_a_person_types_is_listed_for_the_browser_test_to_type():
    """The browser test (tests/test_browser.py, which builds the site: minutes) types each `typed` form and requires
    its page first; these are the forms it must type, each the message's own words."""
    pages = _error_pages()
    typed = pages.typed_queries()
    assert ("errors/connection-closed-by-peer/", "RuntimeError: Connection closed by peer") in typed, typed
    messages = pages.error_queries()
    for location, query in typed:
        said = messages[location]
        assert query.split(": ")[0] in said and query.split(": ")[-1] in said, (location, query)


def test_the_two_gloo_peer_pages_outweigh_a_bug_heading_that_quotes_them_but_not_a_bugs_own_symptom():
    """Several bug pages (boost 10) quote 'Connection closed by peer' in their first heading: at the other error
    pages' boost (2) the message's own page came after them for the short form. Closed and reset weigh the same:
    their whole messages differ in a few words, and each must still list its own page first."""
    pages = _error_pages().error_pages()
    closed, reset = (pages[f"connection-{w}-by-peer.md"]["search"]["boost"] for w in ("closed", "reset"))
    others = {p["search"]["boost"] for n, p in pages.items() if "-by-peer" not in n}
    assert closed == reset and max(others) * 2 < closed < 10, (closed, reset, others)


def test_a_typed_form_that_is_not_a_list_of_text_is_refused_naming_the_page(tmp_path, monkeypatch):
    pages = _error_pages()
    (tmp_path / "odd.md").write_text('---\nmessage: "RuntimeError: x"\ngroup: sizes\ntyped: "RuntimeError"\n---\n# x\n',
                                     encoding="utf-8")
    monkeypatch.setattr(pages, "ERRORS_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="odd.md: typed is a list of the short forms"):
        pages.error_pages()
