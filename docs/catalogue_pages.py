"""The catalogue's pages, generated from the registry (`sandbox.bugs.registry()`) and each bug module's own source.

Split from docs/hooks.py (which runs the build and hands these texts to mkdocs): what a bug page says, the
catalogue table grouped by what a person sees first, the home page's list, and `docs_queries()`, the text a person
would paste into the search box for each bug. Nothing here lists bugs by hand: a module added to `sandbox/bugs/`
gets its page, its row and its group from its own `BUG = Bug(...)` record.
"""
from __future__ import annotations

import ast
import glob
import html
import io
import json
import os
import re
from types import SimpleNamespace

import error_pages  # docs/error_pages.py, beside this file: a bug's message links its page
from recognise import recognise_list  # docs/recognise.py, beside this file

from sandbox import report  # torch-free until it draws a picture
from sandbox.bugs import registry  # reading the registry imports no torch
from sandbox.result import Diagnosis, RankResult, RunResult  # torch-free data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LABS_DIR = os.path.join(ROOT, "labs")

# What a person sees first, in the order the bug index shows the groups: (key, heading, one line under it).
GROUPS = [
    ("error", "An error message", "A rank raises or aborts with a message: search for it, or find it below."),
    ("timeout", "A timeout", "A collective gives up after the group's timeout: the rank that printed it waited "
                             "for another one."),
    ("hang", "A hang at a collective", "Nothing is printed: every rank sits in a call that cannot complete."),
    ("wrong", "A run that finishes with wrong results", "No error and no hang: the numbers or the order are off."),
]


def _literal(pattern: str | None) -> str | None:
    """A regex of the registry made literal (its first alternative), or None when it is not plain text."""
    if not pattern:
        return None
    literal = re.sub(r"\\(.)", r"\1", pattern.split("|")[0])
    return None if re.search(r"[\[\](){}*+?^$]", literal) or re.search(r"\\[dswb]", pattern.split("|")[0]) \
        else literal


def raised_message(bug) -> str | None:
    """The literal text of the error the broken variant must show (the first alternative of its regex), if any."""
    return _literal(bug.broken.error)


def error_message(bug) -> str:
    """The exact text a user sees: the error the broken variant must raise (its regex made literal), else the line it
    must print when the documented symptom quotes it, else the documented symptom."""
    error = raised_message(bug)
    if error:
        return error
    output = _literal(bug.broken.output)
    if output and output in bug.symptom:
        return output
    return bug.symptom


def docs_queries() -> dict[str, str]:
    """{slug: the query a person types into the site's search box}; that bug's page must be listed first. A message
    that several bugs raise (`Connection closed by peer`) names none of them: those bugs are found by their symptom,
    and the message by its page under errors/."""
    bugs = registry()
    msgs = {slug: error_message(bug) for slug, bug in bugs.items()}
    shared = {m for m in msgs.values() if list(msgs.values()).count(m) > 1}
    return {slug: (bugs[slug].symptom if m in shared else m) for slug, m in msgs.items()}


def group_of(bug) -> str:
    """What a person sees first when the broken variant runs, read from its record: a timeout (its error says it
    timed out, or the diagnosis is a rank busy outside any call), an error message (its first verdict is an error
    or a crash), a hang, or a run that finishes (ok) with wrong results."""
    verdicts = (bug.broken.verdict,) if isinstance(bug.broken.verdict, str) else tuple(bug.broken.verdict)
    if verdicts[0] == "timeout" or bug.broken.kind == "straggler" or \
            re.search(r"(?i)timed out|timeout", bug.broken.error or ""):
        return "timeout"
    if verdicts[0] in ("error", "crash"):
        return "error"
    if verdicts[0] == "hang":
        return "hang"
    return "wrong"


def lab_of(slug: str) -> str | None:
    """The lab notebook of a bug, as a path relative to the repository: labs/NN_<slug with _>.ipynb, else a lab that
    walks through several bugs and opens this one (`lab.Lab("<slug>")` in a code cell: labs/27_multinode.ipynb)."""
    labs = sorted(glob.glob(os.path.join(LABS_DIR, "[0-9][0-9]_*.ipynb")))
    for path in labs:
        if os.path.basename(path)[3:-6] == slug.replace("-", "_"):
            return os.path.relpath(path, ROOT)
    for path in labs:
        if slug in lab_slugs(path):
            return os.path.relpath(path, ROOT)
    return None


def lab_slugs(path: str) -> list[str]:
    """The catalogue bugs a lab notebook opens with `lab.Lab("<slug>")`, in the order it opens them."""
    with open(path, encoding="utf-8") as f:
        cells = json.load(f)["cells"]
    found = []
    for cell in cells:
        if cell["cell_type"] == "code":
            found += [s for s in re.findall(r'lab\.Lab\("([^"]+)"\)', "".join(cell["source"])) if s not in found]
    return found


def bug_order() -> list[str]:
    """Slugs in teaching order: the order of their labs (within a lab of several bugs, the order it takes them in),
    then the bugs without a lab, alphabetically."""
    def key(slug):
        lab = lab_of(slug)
        opened = lab_slugs(os.path.join(ROOT, lab)) if lab else []
        return lab or "zz", opened.index(slug) if slug in opened else 0, slug
    return sorted(registry(), key=key)


_MARK = {"BUG": re.compile(r'(#|""")\s*BUG\b'), "FIX": re.compile(r'(#|""")\s*FIX\b')}


def code_of(path: str, variant: str) -> tuple[str, list[int]]:
    """The real source of `broken`/`fixed` and of every other top-level function of the module holding a BUG/FIX
    line, in file order; with the line numbers (1-based, in the text returned) of the marked lines."""
    src = open(path, encoding="utf-8").read()
    lines = src.splitlines()
    mark = _MARK["BUG" if variant == "broken" else "FIX"]
    chunks = []
    for node in ast.parse(src).body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        body = lines[first - 1:node.end_lineno]
        if node.name == variant or (node.name not in ("broken", "fixed") and any(mark.search(x) for x in body)):
            chunks.append(body)
    text, marked = [], []
    for chunk in chunks:
        if text:
            text.append("")
        for line in chunk:
            text.append(line)
            if mark.search(line):
                marked.append(len(text))
    return "\n".join(text), marked


def fence(text: str, lang: str = "text", hl: list[int] | None = None, title: str | None = None) -> str:
    ticks = "````" if "```" in text else "```"
    opts = []
    if title:
        opts.append(f'title="{title}"')
    if hl:
        opts.append('hl_lines="' + " ".join(map(str, hl)) + '"')
    return f"{ticks}{lang} {' '.join(opts)}\n{text}\n{ticks}"


def heading(text: str) -> str:
    """Text safe in a Markdown heading (no markup, no trailing #)."""
    return html.escape(text, quote=False).replace("`", "").replace("*", "\\*").replace("_", "\\_").rstrip("#")


def bug_page(slug: str, run: dict) -> str:
    """The page of one bug. `run` is the build-time run of its broken variant (hooks.run_bugs)."""
    bug = registry()[slug]
    parts = bug.parts
    path = os.path.join(ROOT, *bug.module.split(".")) + ".py"
    rel = os.path.relpath(path, ROOT)
    query = docs_queries()[slug]
    raised = raised_message(bug)
    lab = lab_of(slug)
    out = ["---", "search:", "  boost: 10", "---", "", f"# {bug.title}", ""]
    # what a person pastes is the first heading: a search for it lists this page first (heading words weigh most)
    out += [f"## {heading(query)} {{ #what-you-see }}", ""]
    if raised and raised != query:
        out += [f"The error: `{raised}`", ""]
    if query != bug.symptom:
        out += [f"What you see: {html.escape(bug.symptom, quote=False)}", ""]
    needs = f"needs: {bug.needs}" + (", root (simulated nodes)" if bug.nnodes > 1 else "")
    meta = [f"slug `{slug}`", bug.where, needs, f"module `{rel}`", f"source: {html.escape(bug.source, quote=False)}"]
    out += [" · ".join(meta), ""]
    if lab:
        out += [f"Try it yourself: [the lab](../../{lab}) · at a terminal: `python -m sandbox.repro {slug}`", ""]
    else:
        out += [f"At a terminal: `python -m sandbox.repro {slug}`", ""]
    if parts.get("Simulated"):
        out += ['!!! note "Simulated"', "", *["    " + x for x in parts["Simulated"].splitlines()], ""]
    out += ["## The root-cause chain", ""]
    for key in ("Symptom", "Root cause", "Fix"):
        if parts.get(key):
            out += [f"**{key}.** " + parts[key], ""]
    out += ["## Broken and fixed, side by side", "",
            f"The real code of `{rel}`: the lines marked `BUG` and `FIX` are highlighted.", "",
            '<div class="grid code-pair" markdown>', ""]
    for variant in ("broken", "fixed"):
        text, marked = code_of(path, variant)
        out += ['<div markdown>', "", fence(text, "python", marked, f"{variant}: {rel}"), "", "</div>", ""]
    out += ["</div>", ""]
    out += ["## What the sandbox says", "",
            f"`python -m sandbox.repro {slug} --variant broken`, run when this page was built:", ""]
    out += [fence(sandbox_says(run["run"])), ""] if run.get("run") else [
        f"Not run when this page was built: {run.get('unavailable', 'the run failed')} Run the command above as root "
        "to see it.", ""]
    if bug.broken.note:
        out += [f"How to read it: {bug.broken.note}.", ""]
    out += [f"Expected of the broken variant: {bug.broken.describe()}. Of the fixed one: {bug.fixed.describe()}.", ""]
    page = error_pages.page_for(bug.broken.error)
    if page:  # here, not under the message at the top: words there would pull this page up for the whole message
        title = error_pages.error_pages()[page]["title"]
        out += [f"This message has other causes too: [{title}](../../errors/{page}) lists them, and which rank to "
                "look at first.", ""]
    if run["timeline"]:
        out += ["## The timeline", "",
                "Every rank's `torch.distributed` calls over time; a call still pending when the run was stopped is "
                "hatched.", "", f"![Timeline of the broken variant of {slug}](timeline.png)", ""]
    if bug.gpu:
        out += ["## On real GPUs (NCCL)", "", parts.get("On GPUs", ""), "",
                f"`python -m sandbox.repro {slug} --gpu` runs it on NCCL, one GPU per rank "
                f"({bug.gpu.min_world_size} GPUs at least). Expected of the broken variant there: "
                f"{bug.gpu.broken.describe()}. Of the fixed one: {bug.gpu.fixed.describe()}.", ""]
    out += ["## How to recognise it in your own code", ""]
    out += [f"- {x}" for x in recognise_list(slug, bug)] + [""]
    if lab:
        out += ["## The lab", "",
                f"Run the broken code, read the diagnosis, predict, then write the fix yourself: "
                f"[{os.path.basename(lab)}](../../{lab}).", ""]
    return "\n".join(out)


def sandbox_says(run: dict) -> str:
    """A variant's entry of `python -m sandbox.repro --json` as the terminal shows it: the run's report (drawn by
    `sandbox.report` from the JSON's result), each rank's last lines, then the expectation it was held to."""
    mark = "as documented" if run["as_documented"] else "NOT as documented: " + "; ".join(run["why_not"])
    return report_text(run["result"], max_log_lines=6) + f"\nexpected: {run['expected']} -> {mark}"


def report_text(result: dict, max_log_lines: int = report.MAX_LOG_LINES) -> str:
    """A run's JSON (`RunResult.to_dict()`) drawn by `sandbox.report` as a terminal shows it, without colour."""
    out = io.StringIO()  # not a terminal: no colour, and the report's own width
    report.print_result(result_of(result), logs=True, file=out, max_log_lines=max_log_lines)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()).strip("\n")


def result_of(d: dict) -> RunResult:
    """A RunResult back from its JSON (`RunResult.to_dict()`), for the report to draw. The warnings come back as
    what a report reads of them: their kind, sentence, rule, sites and ranks."""
    g = d["diagnosis"]
    diagnosis = Diagnosis(kind=g["kind"], cause=g["summary"], culprit_ranks=g["culprit_ranks"], op=g["op"],
                          group=g["group"], seq=g["seq"], site=g["site"], details=g["details"])
    ranks = [RankResult(rank=r["rank"], outcome=r["outcome"], exit_code=r["exit_code"], pending=r["pending"],
                        error=r["error"], output=r["output"], stack=r["stack"], pid=r["pid"]) for r in d["ranks"]]
    warnings = [SimpleNamespace(kind=w["kind"], summary=w["summary"], rule=w["rule"], sites=w.get("sites") or {},
                                ranks=w.get("ranks") or []) for w in d["warnings"]]
    return RunResult(verdict=d["verdict"], world_size=d["world_size"], wall_s=d["wall_s"], diagnosis=diagnosis,
                     ranks=ranks, warnings=warnings)


def _cell(text: str) -> str:
    return html.escape(text, quote=False).replace("|", "\\|")


def catalogue_table(error_page_for=lambda regex: None) -> str:
    """The bug index (bugs/index.md): one table per group of what a person sees first, each bug under the group its
    record gives. `error_page_for(regex)` names the error page (`<name>.md` under errors/) whose message the bug's
    error regex matches, to link it."""
    bugs = registry()
    out = []
    for key, head, line in GROUPS:
        slugs = [s for s in bug_order() if group_of(bugs[s]) == key]
        if not slugs:
            continue
        out += [f"## {head}", "", line, "", "| what you see | bug | needs |", "| --- | --- | --- |"]
        for slug in slugs:
            b = bugs[slug]
            raised = raised_message(b)
            seen = _cell(raised or b.symptom)
            page = error_page_for(b.broken.error)
            if page:
                seen = f"[{seen}](../errors/{page})"
            out.append(f"| {seen} | [{_cell(b.title)}]({slug}/index.md) | {b.needs} |")
        out.append("")
    return "\n".join(out).rstrip()


def home_list() -> str:
    """Every bug of the catalogue on the home page, by group, one line each: a bug added to the registry is listed."""
    bugs = registry()
    out = []
    for key, head, _ in GROUPS:
        slugs = [s for s in bug_order() if group_of(bugs[s]) == key]
        if slugs:
            out.append(f"- **{head}**: " + "; ".join(f"[{_cell(bugs[s].title)}](bugs/{s}/index.md)" for s in slugs))
    return "\n".join(out)
