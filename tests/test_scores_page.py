"""The page "How well does it diagnose?" (docs/scores.md, filled by docs/scores_page.py), rendered from a sample
scoreboard JSON (tests/data/scores_sample.json, a fixture in the format of benchmarks/scoreboard.json, never shown on
the site) without building the site.

The figures the page must show are recomputed here from the sample's runs by the scoring rules (a faulty program is
named when the tool reported and named the label's cause; helpful when it also singled out the culprit ranks, not
every rank, and cited the cause's line; noise is a report on a correct twin), so a page that copied a wrong figure,
dropped a case or a tool, or lost the date, torch version or command fails here. The page's markdown is converted
with the site's own markdown extensions (from mkdocs.yml), so a table that breaks its columns fails here too; the
strict build of the whole site is tests/test_docs.py's.
"""
import copy
import hashlib
import html
import importlib.util
import json
import os
import re
import statistics
import sys

import pytest

from conftest import ROOT, need

SAMPLE = os.path.join(ROOT, "tests", "data", "scores_sample.json")
PARTS = ("scores-main", "scores-tools", "scores-classes", "scores-cases", "scores-said", "scores-nccl", "scores-after")
GPU = "1x NVIDIA H100 80GB HBM3, 16 CPU cores"


def _docs_module(name):
    """A module of docs/, loaded from its file as mkdocs loads the hook (docs/ is not a package)."""
    sys.path.insert(0, os.path.join(ROOT, "docs"))
    spec = importlib.util.spec_from_file_location(f"docs_{name}", os.path.join(ROOT, "docs", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


page = _docs_module("scores_page")


# -- the scoring rules, written again from the spec, independently of the scoreboard and the page --------------

def rescore(data):
    """{tool: scores} from the runs and the labels alone; also checks each run's own verdict and helpful flag."""
    out = {}
    for tool in {r["tool"] for r in data["runs"]}:
        faulty, fixed, helpful, seconds = [], [], 0, []
        for r in (r for r in data["runs"] if r["tool"] == tool):
            label = data["corpus"][r["case"]]
            if r["variant"] == "fixed":
                assert r["verdict"] == ("noise" if r["reported"] else "quiet"), r
                fixed.append(r["verdict"])
                continue
            v = "fn" if not r["reported"] else "tp" if label["names"] in r["names"] else "wrong"
            everyone = set(range(label["world"]))
            h = (v == "tp" and set(label["culprits"]) <= set(r["ranks"]) and label["cause"]["line"] in r["lines"]
                 and (set(r["ranks"]) != everyone or set(label["culprits"]) == everyone))
            assert (r["verdict"], r["helpful"]) == (v, h), r
            faulty.append(v)
            helpful += h
            if r["reported"]:
                seconds.append(r["seconds"])
        tp, wrong, noisy = faulty.count("tp"), faulty.count("wrong"), fixed.count("noise")
        recall = tp / len(faulty)
        precision = tp / (tp + wrong + noisy) if tp + wrong + noisy else None
        f1 = 2 * recall * precision / (recall + precision) if tp else 0.0  # no named case: F1 0
        out[tool] = {"recall": recall, "precision": precision, "f1": f1, "helpfulness": helpful / len(faulty),
                     "noise": noisy / len(fixed), "median_s": statistics.median(seconds) if seconds else None,
                     "tp": tp, "wrong": wrong, "fn": faulty.count("fn"), "noisy": noisy, "faulty": len(faulty),
                     "fixed": len(fixed), "helpful": helpful}
    return out


def expected_row(tool, s):
    """The main table's row for a tool, as the page must show it."""
    two = lambda x: "–" if x is None else f"{x:.2f}"  # noqa: E731
    return [page.TOOLS[tool], two(s["recall"]), two(s["precision"]), two(s["f1"]), two(s["helpfulness"]),
            two(s["noise"]), "–" if s["median_s"] is None else f"{s['median_s']:.1f} s",
            f"{s['tp']} / {s['wrong']} / {s['fn']} of {s['faulty']}", f"{s['noisy']} of {s['fixed']}"]


def rows(table):
    """A markdown table's body rows, each a list of its cells."""
    lines = [ln for ln in table.splitlines() if ln.strip().startswith("|")][2:]
    return [[c.strip() for c in ln.strip().strip("|").split(" | ")] for ln in lines]


def main_row_problems(text, data):
    """What the main table in text gets wrong against the figures recomputed from data's runs ([] when right)."""
    got = {r[0]: r for r in rows(text.split("\n\n")[0])}
    problems = []
    for tool, s in sorted(rescore(data).items()):
        want = expected_row(tool, s)
        if got.get(want[0]) != want:
            problems.append(f"{tool}: shows {got.get(want[0])}, the runs give {want}")
    return problems


# -- fixtures ----------------------------------------------------------------------------------------------------

@pytest.fixture
def sample():
    with open(SAMPLE, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture
def corpus(tmp_path, sample):
    """A corpus folder with a file per sample case, each with its own docstring; the sample's hashes are made those
    of the files, except for the first case, whose file has "changed since the run"."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i, case in enumerate(sorted(sample["corpus"])):
        src = f'# case: {case}\n"""The {case} program | goes <wrong> here."""\nimport torch\n'
        (folder / f"{case}.py").write_text(src)
        sample["corpus"][case]["sha256"] = hashlib.sha256(src.encode()).hexdigest() if i else "0" * 64
    return str(folder)


def write(tmp_path, data, name="scoreboard.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def render(scores, corpus, nccl="/nonexistent/scoreboard-nccl.json", after="/nonexistent/scoreboard-after.json",
           after_before="/nonexistent/scoreboard-after-before.json"):
    return {n: page.markdown(n, scores=scores, nccl=nccl, corpus=corpus, after=after, corpus_after=corpus,
                             after_before=after_before) for n in PARTS}


def first_scoring(now):
    """`now` as an earlier scoring that missed every other faulty case, made the day before."""
    before = copy.deepcopy(now)
    faulty = [r for r in before["runs"] if r["variant"] == "faulty"]
    for r in faulty[::2]:
        r.update(reported=False, verdict="fn", helpful=False, names=[], ranks=[], lines=[])
    before.update(made="2026-11-27T08:15:00Z", scores=rescore(before), code="abc1234")
    return before


def nccl_sample(sample):
    """The sample as the GPU machine would write it: the nccl cases, the sandbox and the Flight Recorder only,
    scored again from its runs."""
    data = copy.deepcopy(sample)
    data["corpus"] = {c: lb for c, lb in data["corpus"].items() if lb["nccl"]}
    data["runs"] = [r for r in data["runs"] if r["case"] in data["corpus"] and r["tool"] in ("sandbox", "flight")]
    data.update(made="2026-02-03T10:20:00Z", torch="2.13.0+cu128", machine=GPU, backend="nccl",
                tools={t: data["tools"][t] for t in ("sandbox", "flight")}, scores=rescore(data), per_class={})
    return data


def after_sample(sample):
    """The sample as the set written after the rules is scored: the sandbox alone, scored again from its runs."""
    data = copy.deepcopy(sample)
    data["runs"] = [r for r in data["runs"] if r["tool"] == "sandbox"]
    data.update(made="2026-11-28T00:59:00Z", tools={"sandbox": data["tools"]["sandbox"]}, scores=rescore(data),
                per_class={"sandbox": data["per_class"]["sandbox"]},
                command="python benchmarks/scoreboard.py --corpus benchmarks/corpus_after --tools sandbox")
    return data


# -- the tests ---------------------------------------------------------------------------------------------------

def test_the_sample_has_every_tool_and_every_verdict(sample):
    """The fixture exercises the page: four tools, each verdict kind, a helpful and an unhelpful named report."""
    assert set(sample["tools"]) == set(page.TOOLS)
    assert {r["verdict"] for r in sample["runs"]} == {"tp", "wrong", "fn", "noise", "quiet"}
    assert {r["helpful"] for r in sample["runs"] if r["verdict"] == "tp"} == {True, False}
    assert {r["outcome"] for r in sample["runs"] if r["verdict"] == "fn"} >= {"limit", "exit 0"}
    assert "test fixture" in sample["machine"]  # never mistaken for a real run


def test_main_table_shows_the_figures_the_runs_give(tmp_path, sample, corpus):
    text = render(write(tmp_path, sample), corpus)["scores-main"]
    assert main_row_problems(text, sample) == []
    assert [r[0] for r in rows(text.split("\n\n")[0])] == list(page.TOOLS.values())  # in the page's order


def test_the_figure_check_can_fail(tmp_path, sample, corpus):
    """A scores entry whose ratio disagrees with its runs shows on the page, and the check above catches it."""
    sample["scores"]["detail"]["recall"] = 0.9
    text = render(write(tmp_path, sample), corpus)["scores-main"]
    assert any(p.startswith("detail:") for p in main_row_problems(text, sample))


def test_counts_that_disagree_with_the_runs_fail_the_build(tmp_path, sample, corpus):
    sample["scores"]["sandbox"]["tp"] -= 1
    with pytest.raises(ValueError, match="scores of sandbox disagree with its runs"):
        page.markdown("scores-main", scores=write(tmp_path, sample), corpus=corpus)


def test_provenance_date_torch_machine_and_command(tmp_path, sample, corpus):
    text = render(write(tmp_path, sample), corpus)["scores-main"]
    for want in ("2 January 2026, 03:04 UTC", f"torch {sample['torch']}", f"Python {sample['python']}",
                 sample["machine"], f"backend {sample['backend']}", f"{sample['limit_s']} s",
                 f"```bash\n{sample['command']}\n```"):
        assert want in text, want


def test_every_case_has_its_row_with_each_tools_verdict(tmp_path, sample, corpus):
    text = render(write(tmp_path, sample), corpus)["scores-cases"]
    body = {re.match(r"\*\*(\w+)\*\*", r[0]).group(1): r for r in rows(text)}
    assert sorted(body) == sorted(sample["corpus"])
    first = sorted(sample["corpus"])[0]
    for case, label in sample["corpus"].items():
        row = body[case]
        assert f"The {case} program &#124; goes &lt;wrong&gt; here." in row[0]  # its docstring, cell-safe
        assert ("changed since this run" in row[0]) == (case == first)
        assert row[1] == (f"{label['class']}<br>names {label['names']}<br>{page.ranks(label['culprits'])}: "
                          f"{label['cause']['call']}, line {label['cause']['line']}")
        for tool, cell in zip(page.TOOLS, row[2:]):
            run = {r["variant"]: r for r in sample["runs"] if r["case"] == case and r["tool"] == tool}
            faulty, twin = cell.split("<br>twin: ")
            word = {"tp": "named", "wrong": "wrong", "fn": "missed"}[run["faulty"]["verdict"]]
            assert faulty.startswith(word) and ("helpful" in faulty) == run["faulty"]["helpful"], (case, tool, cell)
            assert twin.startswith(run["fixed"]["verdict"]), (case, tool, cell)
    assert "missed (limit)" in text and "wrong: timeout" in text and "noise: unused_parameters" in text


def test_every_family_has_its_row(tmp_path, sample, corpus):
    text = render(write(tmp_path, sample), corpus)["scores-classes"]
    body = {r[0]: r[1:] for r in rows(text)}
    assert sorted(body) == sorted({lb["class"] for lb in sample["corpus"].values()})
    for family, cells in body.items():
        for tool, cell in zip(page.TOOLS, cells):
            runs = [r for r in sample["runs"] if r["tool"] == tool and r["variant"] == "faulty"
                    and sample["corpus"][r["case"]]["class"] == family]
            assert cell.startswith(f"{sum(r['verdict'] == 'tp' for r in runs)}/{len(runs)}"), (family, tool, cell)


def test_what_each_tool_said_is_verbatim(tmp_path, sample, corpus):
    text = render(write(tmp_path, sample), corpus)["scores-said"]
    for r in sample["runs"]:
        if r["said"]:
            assert page.code(r["said"]) in text
    assert text.count('??? quote "') == len(sample["corpus"])


def test_each_parsers_rules_are_the_scoreboards_own(tmp_path, sample, corpus):
    """The list of tools shows every rule of benchmarks/scoring/parsers.py, and each tool's command from the JSON."""
    p = page.rules()
    text = render(write(tmp_path, sample), corpus)["scores-tools"]
    for kind, cause in list(p.SANDBOX_DIAGNOSES.items()) + list(p.SANDBOX_WARNINGS.items()):
        assert f"| {kind}` | `{cause}` |" in text.replace("diagnosis `", "").replace("warning `", ""), kind
    for cause, pattern in p.TORCHRUN_MESSAGES + p.FRTRACE_MESSAGES:
        assert f"| {page.code(pattern)} | " + (f"`{cause}`" if cause else "(") in text, pattern
    assert p.ROOT_CAUSE in text and all(t in text for t in p.FRTRACE_MISMATCH_TYPES)
    for tool, command in sample["tools"].items():
        assert f"**{page.TOOLS[tool]}**: run as {page.code(command)}." in text


def test_before_the_first_run_the_page_says_so(tmp_path, corpus):
    parts = render(str(tmp_path / "missing.json"), corpus)
    assert "has not been run yet" in parts["scores-main"]
    assert f"```bash\n{page.COMMAND}\n```" in parts["scores-main"]
    for name in ("scores-classes", "scores-cases", "scores-said"):
        assert "has not been run" in parts[name]
    assert all(page.TOOLS[t] in parts["scores-tools"] for t in page.TOOLS)  # how each is parsed stands before
    assert "has not been scored yet" in parts["scores-nccl"]
    assert f"```bash\n{page.NCCL_COMMAND}\n```" in parts["scores-nccl"]
    assert "has not been scored yet" in parts["scores-after"]
    assert f"```bash\n{page.AFTER_COMMAND}\n```" in parts["scores-after"]


def test_nccl_section_from_its_own_file(tmp_path, sample, corpus):
    nccl = nccl_sample(sample)
    text = page.markdown("scores-nccl", nccl=write(tmp_path, nccl, "nccl.json"), corpus=corpus)
    assert main_row_problems(text, nccl) == []
    assert {r[0] for r in rows(text.split("\n\n")[0])} == {page.TOOLS["sandbox"], page.TOOLS["flight"]}
    for want in (GPU, "torch 2.13.0+cu128", "3 February 2026", "backend nccl"):
        assert want in text, want
    assert page.TOOLS["torchrun"] not in text and "objects_gpu_tensor" not in text  # nccl: no


def test_the_set_written_after_the_rules_from_its_own_file(tmp_path, sample, corpus):
    """Its own figures (the sandbox's, recomputed from its runs), its date and command, its families and cases."""
    after = after_sample(sample)
    text = page.markdown("scores-after", after=write(tmp_path, after, "after.json"), corpus_after=corpus,
                         after_before="/nonexistent/before.json")
    assert main_row_problems(text, after) == []
    assert "before any rule was changed" not in text  # no first scoring kept: no comparison
    assert [r[0] for r in rows(text.split("\n\n")[0])] == [page.TOOLS["sandbox"]]
    for want in ("28 November 2026, 00:59 UTC", "--corpus benchmarks/corpus_after", f"({len(after['corpus'])} cases"):
        assert want in text, want
    assert all(f"**{case}**" in text for case in after["corpus"])
    assert page.TOOLS["torchrun"] not in text


def test_the_set_written_after_the_rules_beside_its_first_scoring(tmp_path, sample, corpus):
    """The first scoring, kept in its own file, and the latest: one row each, their own figures and dates, ahead of
    the cases folded away."""
    now = after_sample(sample)
    before = first_scoring(now)
    assert before["scores"]["sandbox"]["recall"] < now["scores"]["sandbox"]["recall"]
    text = page.markdown("scores-after", after=write(tmp_path, now, "after.json"), corpus_after=corpus,
                         after_before=write(tmp_path, before, "before.json"))
    table = text[text.index("before any rule was changed"):text.index("??? note")]
    got = rows(table)
    assert [r[0] for r in got] == ["before (the sandbox of commit abc1234), 27 November 2026, 08:15 UTC",
                                "now, 28 November 2026, 00:59 UTC"], got
    for row, data in zip(got, (before, now)):
        s = data["scores"]["sandbox"]
        assert row[1:3] == [page.ratio(s["recall"]), page.ratio(s["precision"])], (row, s)
        assert row[7] == f"{s['tp']} / {s['wrong']} / {s['fn']} of {s['faulty']}", row


def test_the_page_converts_with_the_sites_extensions(tmp_path, sample, corpus):
    """Every marker of docs/scores.md is filled; the markdown converts with mkdocs.yml's extensions into tables
    whose every row has as many cells as the header, and folded blocks per case."""
    need("mkdocs", "markdown", "yaml", "pymdownx")  # the site's own converter and extensions (the docs extras)
    import markdown as md
    import yaml
    from mkdocs.utils.meta import get_data

    source, meta = get_data(open(os.path.join(ROOT, "docs", "scores.md"), encoding="utf-8").read())
    assert meta == {"hide": ["toc"]}  # the wide tables take the table of contents' column
    markers = re.findall(r"<!-- gen: (.+?) -->", source)
    assert sorted(markers) == sorted(PARTS)
    parts = render(write(tmp_path, sample), corpus, nccl=write(tmp_path, nccl_sample(sample), "nccl.json"),
                   after=write(tmp_path, after_sample(sample), "after.json"),
                   after_before=write(tmp_path, first_scoring(after_sample(sample)), "before.json"))
    filled = re.sub(r"<!-- gen: (.+?) -->", lambda m: parts[m.group(1)], source)
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        exts = yaml.safe_load(f)["markdown_extensions"]
    names = [e if isinstance(e, str) else next(iter(e)) for e in exts]
    config = {next(iter(e)): e[next(iter(e))] for e in exts if isinstance(e, dict)}
    out = md.markdown(filled, extensions=names, extension_configs=config)
    tables = re.findall(r"<table>(.*?)</table>", out, re.S)
    assert len(tables) == 12  # scores, three parsers' rules, family, case, NCCL scores and cases, the set written
    # after the rules: its scores, families, first scoring beside the latest, and cases
    for t in tables:
        widths = {len(re.findall(r"<t[hd][ >]", tr)) for tr in re.findall(r"<tr>(.*?)</tr>", t, re.S)}
        assert len(widths) == 1, f"a row with another number of cells: {widths}"
    # a folded block per case, one for the NCCL cases, one for the later set's cases, one per parser's rules: each
    # one a <details>, none left as text
    assert out.count("<details") == filled.count("\n??? ") + filled.count("\n    ??? ") == len(sample["corpus"]) + 5
    assert "???" not in out
    assert "<!-- gen:" not in out and "<script" not in out
    assert html.escape("goes <wrong> here", quote=False) in out


def test_the_hook_delegates_to_the_page():
    need("mkdocs")  # docs/hooks.py is an mkdocs hook: it imports mkdocs
    hooks = _docs_module("hooks")
    assert hooks.gen("scores-main") == page.markdown("scores-main")
    with pytest.raises(KeyError):
        hooks.gen("scores-nonsense")
