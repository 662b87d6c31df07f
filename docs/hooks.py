"""The docs site's build hook (mkdocs.yml: `hooks: [docs/hooks.py]`): the pages that must not drift from the code.

At build time it
- adds one page per catalogue bug at `bugs/<slug>/` from the registry (`sandbox.bugs.registry()`) and the bug
  module's own source: its docstring's Symptom / Root cause / Fix (`Bug.parts`, the one parse of it), its real
  `broken()` and `fixed()` (and the helpers holding its `BUG` / `FIX` lines) side by side, the report of a real run
  of the broken variant and its timeline; a bug added to the registry gets its page without editing the site. The
  run is `python -m sandbox.repro SLUG --variant broken --json`: the page reads its JSON (`RunResult.to_dict()`, the
  contract every tool reads) and draws it with the sandbox's own report, never by scraping what a terminal shows;
- executes every lab (`labs/*.ipynb`, committed without outputs) in a real kernel, in parallel, and hands the
  executed copies to mkdocs-jupyter, which renders them under `labs/`;
- runs `examples/mismatch.py` on 4 ranks (`python -m sandbox.run --json`) for the home page's verdict and timeline;
- fills the `<!-- gen: NAME -->` markers of the hand-written pages (the CLI's real `--help` texts, README sections,
  the trace format from `sandbox/events.py`);
- strips any script a notebook template would load from another host (the site is offline).

`docs_queries()` gives, per bug, the text a person would paste into the search box (its error message or symptom):
the page of that bug puts it verbatim at its top, and the browser test types it.

Run the build from the repository root with the package importable (`.venv/bin/mkdocs build --strict`).
"""
from __future__ import annotations

import ast
import concurrent.futures
import glob
import html
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from recognise import recognise_list  # noqa: E402  docs/recognise.py, beside this file

from sandbox import report  # noqa: E402  torch-free until it draws a picture
from sandbox.bugs import registry  # noqa: E402  reading the registry imports no torch
from sandbox.result import Diagnosis, RankResult, RunResult  # noqa: E402  torch-free data

log = logging.getLogger("mkdocs.plugins.dist_sandbox")
LABS_DIR = os.path.join(ROOT, "labs")
LAB_CELL_TIMEOUT_S = 120
LAB_RETRIES = int(os.environ.get("DOCS_LAB_RETRIES", "2"))  # under heavy load a lab's run may come out otherwise
WORKERS = int(os.environ.get("DOCS_JOBS", "2"))
COLUMNS = "110"

_state: dict = {}


# ------------------------------------------------------------------------------------------- what the site shows

def _literal(pattern: str | None) -> str | None:
    """A regex of the registry made literal (its first alternative), or None when it is not plain text."""
    if not pattern:
        return None
    literal = re.sub(r"\\(.)", r"\1", pattern.split("|")[0])
    return None if re.search(r"[\[\](){}*+?^$]", literal) else literal


def error_message(bug) -> str:
    """The exact text a user sees and would search for: the error the broken variant must raise (its regex made
    literal), else the line it must print when the documented symptom quotes it, else the documented symptom."""
    error = _literal(bug.broken.error)
    if error:
        return error
    output = _literal(bug.broken.output)
    if output and output in bug.symptom:
        return output
    return bug.symptom


def docs_queries() -> dict[str, str]:
    """{slug: the query a person types into the site's search box}; that bug's page must be listed first."""
    return {slug: error_message(bug) for slug, bug in registry().items()}


def lab_of(slug: str) -> str | None:
    """The lab notebook of a bug (labs/NN_<slug with _>.ipynb), as a path relative to the repository."""
    for path in sorted(glob.glob(os.path.join(LABS_DIR, "[0-9][0-9]_*.ipynb"))):
        if os.path.basename(path)[3:-6] == slug.replace("-", "_"):
            return os.path.relpath(path, ROOT)
    return None


def bug_order() -> list[str]:
    """Slugs in teaching order: the order of their labs, then the bugs without a lab, alphabetically."""
    bugs = registry()
    return sorted(bugs, key=lambda s: (lab_of(s) or "zz", s))


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


# ------------------------------------------------------------------------------------------------- build-time runs

def _env() -> dict:
    env = dict(os.environ, NO_COLOR="1", COLUMNS=COLUMNS, PYTHONUNBUFFERED="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("FORCE_COLOR", None)
    return env


def _run(cmd: list[str], timeout: float = 300) -> tuple[int, str]:
    p = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + (p.stderr if p.returncode not in (0, 1) else "")


def run_bug(slug: str, out_dir: str) -> dict:
    """The broken variant, run as `python -m sandbox.repro SLUG --variant broken --json --timeline ...`: its JSON,
    and whether the timeline picture was drawn."""
    png = os.path.join(out_dir, "bugs", slug, "timeline.png")
    os.makedirs(os.path.dirname(png), exist_ok=True)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "sandbox.repro", slug, "--variant", "broken", "--json", "--timeline", png],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    try:
        run = json.loads(p.stdout)["variants"][0]
    except (ValueError, KeyError, IndexError):  # no JSON: the run itself failed; on_files names it with its stderr
        run = None
    return {"rc": p.returncode, "run": run, "stderr": p.stderr[-3000:], "timeline": os.path.exists(png),
            "seconds": time.monotonic() - t0}


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
    what a report reads of them: their kind, sentence and rule."""
    g = d["diagnosis"]
    diagnosis = Diagnosis(kind=g["kind"], cause=g["summary"], culprit_ranks=g["culprit_ranks"], op=g["op"],
                          group=g["group"], seq=g["seq"], site=g["site"], details=g["details"])
    ranks = [RankResult(rank=r["rank"], outcome=r["outcome"], exit_code=r["exit_code"], pending=r["pending"],
                        error=r["error"], output=r["output"], stack=r["stack"], pid=r["pid"]) for r in d["ranks"]]
    warnings = [SimpleNamespace(kind=w["kind"], summary=w["summary"], rule=w["rule"]) for w in d["warnings"]]
    return RunResult(verdict=d["verdict"], world_size=d["world_size"], wall_s=d["wall_s"], diagnosis=diagnosis,
                     ranks=ranks, warnings=warnings)


def run_home(out_dir: str) -> dict:
    """examples/mismatch.py on 4 ranks, run as `python -m sandbox.run -n 4 --json --timeline ...`: the home page's
    verdict, drawn from the JSON as the terminal draws it."""
    png = os.path.join(out_dir, "assets", "home-timeline.png")
    os.makedirs(os.path.dirname(png), exist_ok=True)
    p = subprocess.run([sys.executable, "-m", "sandbox.run", "-n", "4", "--json", "--timeline", png,
                        "examples/mismatch.py"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    try:
        output = report_text(json.loads(p.stdout))
    except ValueError:  # no JSON: the run itself failed; the page says so and the build log has why
        output = f"(python -m sandbox.run exited {p.returncode}: {p.stderr[-2000:]})"
    return {"rc": p.returncode, "output": output, "timeline": os.path.exists(png)}


def _kernel(tmp: str) -> str:
    """A kernelspec for this interpreter in a private folder on JUPYTER_PATH (the venv's `python3` spec says just
    `python`, whatever is first on PATH)."""
    name = "dist-sandbox-docs"
    spec = os.path.join(tmp, "jupyter", "kernels", name)
    os.makedirs(spec, exist_ok=True)
    with open(os.path.join(spec, "kernel.json"), "w") as f:
        json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                   "display_name": "dist-sandbox docs", "language": "python"}, f)
    return name


def execute_lab(path: str, out_dir: str, kernel: str, jupyter_path: str) -> dict:
    """One lab, executed in its own kernel process (a subprocess, so several run at once), into out_dir/labs/."""
    dest = os.path.join(out_dir, "labs", os.path.basename(path))
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    code = (
        "import sys, nbformat\n"
        "from nbclient import NotebookClient\n"
        "src, dest, kernel, cwd, timeout = sys.argv[1:6]\n"
        "nb = nbformat.read(src, as_version=4)\n"
        "NotebookClient(nb, timeout=int(timeout), kernel_name=kernel, allow_errors=False,\n"
        "               resources={'metadata': {'path': cwd}}).execute()\n"
        "nbformat.write(nb, dest)\n")
    env = _env()
    env["JUPYTER_PATH"] = os.pathsep.join(filter(None, [jupyter_path, env.get("JUPYTER_PATH")]))
    t0, tries = time.monotonic(), []
    for _ in range(1 + LAB_RETRIES):
        p = subprocess.run([sys.executable, "-c", code, path, dest, kernel, LABS_DIR, str(LAB_CELL_TIMEOUT_S)],
                           cwd=LABS_DIR, env=env, capture_output=True, text=True, timeout=900)
        tries.append(p.stderr[-3000:])
        if p.returncode == 0:
            break
    if len(tries) > 1:  # say so: a lab that needed a second try is a flaky lab (a bug to report, not to hide)
        log.info("lab %s failed once and was run again:\n%s", os.path.basename(path), tries[0])
    return {"rc": p.returncode, "dest": dest, "stderr": p.stderr[-3000:], "seconds": time.monotonic() - t0,
            "tries": len(tries)}


def start_jobs() -> None:
    """Start every build-time run at once, on a pool of DOCS_JOBS workers (2 by default)."""
    tmp = tempfile.mkdtemp(prefix="dist-sandbox-docs-")
    out = os.path.join(tmp, "gen")
    kernel = _kernel(tmp)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS)
    labs = sorted(glob.glob(os.path.join(LABS_DIR, "*.ipynb")))
    jobs = {"home": pool.submit(run_home, out)}
    # the labs take longest: queue them first
    for path in labs:
        jobs["lab:" + os.path.basename(path)] = pool.submit(execute_lab, path, out, kernel, os.path.join(tmp, "jupyter"))
    for slug in bug_order():
        jobs["bug:" + slug] = pool.submit(run_bug, slug, out)
    _state.update(tmp=tmp, out=out, pool=pool, jobs=jobs, t0=time.monotonic(), labs=labs)


def result(key: str) -> dict:
    return _state["jobs"][key].result()


# ------------------------------------------------------------------------------------------------------ the pages

def bug_page(slug: str) -> str:
    bug = registry()[slug]
    parts = bug.parts
    path = os.path.join(ROOT, *bug.module.split(".")) + ".py"
    rel = os.path.relpath(path, ROOT)
    msg = error_message(bug)
    run = result("bug:" + slug)
    lab = lab_of(slug)
    out = ["---", "search:", "  boost: 10", "---", "", f"# {bug.title}", ""]
    # the message is the first heading: a search for it lists this page first (heading words weigh most)
    out += [f"## {_heading(msg)} {{ #what-you-see }}", ""]
    if msg != bug.symptom:
        out += [f"What you see: {html.escape(bug.symptom, quote=False)}", ""]
    meta = [f"slug `{slug}`", f"{bug.world_size} ranks", f"needs: {bug.needs}",
            f"module `{rel}`", f"source: {html.escape(bug.source, quote=False)}"]
    out += [" · ".join(meta), ""]
    if lab:
        out += [f"Try it yourself: [the lab](../../{lab}) · at a terminal: `python -m sandbox.repro {slug}`", ""]
    else:
        out += [f"At a terminal: `python -m sandbox.repro {slug}`", ""]
    if parts.get("Simulated"):
        out += ['!!! note "Simulated"', "", *["    " + x for x in parts["Simulated"].splitlines()], ""]
    out += ["## The root-cause chain", ""]
    for key, head in (("Symptom", "Symptom"), ("Root cause", "Root cause"), ("Fix", "Fix")):
        if parts.get(key):
            out += [f"**{head}.** " + parts[key], ""]
    out += ["## Broken and fixed, side by side", "",
            f"The real code of `{rel}`: the lines marked `BUG` and `FIX` are highlighted.", "",
            '<div class="grid code-pair" markdown>', ""]
    for variant in ("broken", "fixed"):
        text, marked = code_of(path, variant)
        out += ['<div markdown>', "", fence(text, "python", marked, f"{variant}: {rel}"), "", "</div>", ""]
    out += ["</div>", ""]
    out += ["## What the sandbox says", "",
            f"`python -m sandbox.repro {slug} --variant broken`, run when this page was built:", "",
            fence(sandbox_says(run["run"])), ""]
    if bug.broken.note:
        out += [f"How to read it: {bug.broken.note}.", ""]
    out += [f"Expected of the broken variant: {bug.broken.describe()}. Of the fixed one: {bug.fixed.describe()}.", ""]
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
                f"Run the broken code, read the diagnosis, predict, then write the fix yourself: [{os.path.basename(lab)}](../../{lab}).", ""]
    return "\n".join(out)


def _heading(text: str) -> str:
    """Text safe in a Markdown heading (no markup, no trailing #)."""
    return html.escape(text, quote=False).replace("`", "").replace("*", "\\*").replace("_", "\\_").rstrip("#")


def catalogue_table() -> str:
    bugs = registry()
    rows = ["| bug | what you see | needs |", "| --- | --- | --- |"]
    for slug in bug_order():
        b = bugs[slug]
        msg = error_message(b).replace("|", "\\|")
        rows.append(f"| [{b.title}]({slug}/index.md) | {html.escape(msg, quote=False)} | {b.needs} |")
    return "\n".join(rows)


def readme_section(title: str) -> str:
    """A `## title...` section of README.md, without its heading; links to repository files become plain code."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    m = re.search(r"^## " + re.escape(title) + r".*?\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not m:
        raise KeyError(f"README.md has no section {title!r}")
    body = m.group(1).strip()
    return re.sub(r"\[([^\]]+)\]\((?!https?://)[^)]+\)", r"\1", body)


def help_text(module: str) -> str:
    rc, out = _run([sys.executable, "-m", module, "--help"], timeout=120)
    if rc != 0:
        raise RuntimeError(f"python -m {module} --help exited {rc}: {out}")
    return fence(out.rstrip())


def gen(name: str) -> str:
    if name == "home-verdict":
        return fence(result("home")["output"])
    if name == "home-timeline":
        return ("![Timeline of examples/mismatch.py on 4 ranks: rank 2 is in a broadcast while the others are in "
                "an all_reduce](assets/home-timeline.png)") if result("home")["timeline"] else ""
    if name == "catalogue":
        return catalogue_table()
    if name.startswith("help "):
        return help_text(name[5:])
    if name.startswith("readme "):
        return readme_section(name[7:])
    if name == "events-doc":
        import sandbox.events
        return sandbox.events.__doc__.strip()
    if name == "labs":
        rows = ["| lab | |", "| --- | --- |"]
        for path in _state["labs"]:
            base = os.path.basename(path)
            title = _nb_title(path)
            rows.append(f"| [{base[:-6]}]({base}) | {title} |")
        return "\n".join(rows)
    raise KeyError(f"unknown generated part {name!r}")


def _nb_title(path: str) -> str:
    nb = json.load(open(path, encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return os.path.basename(path)


# ------------------------------------------------------------------------------------------------------ the events

def on_config(config):
    """Fill the nav's "Bug catalogue" section with one page per registry bug, in teaching order, and start the
    build-time runs."""
    bugs = registry()
    for item in config["nav"]:
        if isinstance(item, dict) and "Bug catalogue" in item:
            section = item["Bug catalogue"]
            section[:] = [x for x in section if not (isinstance(x, dict) and
                                                     any(str(v).startswith("bugs/") and v != "bugs/index.md"
                                                         for v in x.values()))]
            section += [{bugs[s].title: f"bugs/{s}/index.md"} for s in bug_order()]
        if isinstance(item, dict) and "Labs" in item:
            section = item["Labs"]
            section[:] = [x for x in section if not (isinstance(x, dict) and
                                                     any(str(v).endswith(".ipynb") for v in x.values()))]
            section += [{_nb_title(p): "labs/" + os.path.basename(p)}
                        for p in sorted(glob.glob(os.path.join(LABS_DIR, "*.ipynb")))]
    if "jobs" not in _state:
        start_jobs()
    return config


@event_priority(100)  # before mkdocs-jupyter wraps the notebooks
def on_files(files, config):
    out, t0 = _state["out"], time.monotonic()
    for slug in bug_order():
        files.append(File.generated(config, f"bugs/{slug}/index.md", content=f"<!-- gen: bug {slug} -->\n"))
    failed = []
    for key, fut in _state["jobs"].items():
        r = fut.result()
        if key.startswith("lab:") and r["rc"] != 0:
            failed.append(f"{key[4:]}:\n{r['stderr']}")
        if key.startswith("bug:") and r["run"] is None:
            failed.append(f"{key[4:]}: python -m sandbox.repro --json printed no run (exit {r['rc']}):\n{r['stderr']}")
    if failed:
        raise RuntimeError("docs build: these build-time runs failed:\n" + "\n".join(failed))
    for path in _state["labs"]:
        base = os.path.basename(path)
        files.append(File(f"labs/{base}", src_dir=out, dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    for png in glob.glob(os.path.join(out, "**", "*.png"), recursive=True):
        files.append(File(os.path.relpath(png, out), src_dir=out, dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    times = {k: round(f.result().get("seconds", 0), 1) for k, f in _state["jobs"].items()}
    log.info("build-time runs done %.1f s after the build started (waited %.1f s here): %s",
             time.monotonic() - _state["t0"], time.monotonic() - t0, times)
    return files


_GEN = re.compile(r"<!-- gen: (.+?) -->")


def on_page_markdown(markdown, page, config, files):
    m = re.fullmatch(r"<!-- gen: bug (\S+) -->\s*", markdown)
    if m:
        return bug_page(m.group(1))
    return _GEN.sub(lambda m: gen(m.group(1)), markdown)


def on_page_read_source(page, config):
    """The generated bug pages carry front matter (search boost): return their whole source here, so mkdocs reads
    the meta from it."""
    m = re.fullmatch(r"bugs/(\S+)/index\.md", page.file.src_uri)
    if m and m.group(1) in registry():
        return bug_page(m.group(1))
    return None


_EXTERNAL_SCRIPT = re.compile(r'<script[^>]*\ssrc="(?:https?:)?//[^"]*"[^>]*>\s*</script>', re.I)
_EXTERNAL_CSS = re.compile(r'<link[^>]*\shref="(?:https?:)?//[^"]*"[^>]*>', re.I)
# an inline script that would fetch code from another host (nbconvert's Mermaid loader imports it from a CDN)
_FETCHING_SCRIPT = re.compile(r'<script\b[^>]*>(?:(?!</script>).)*?(?:import\(|src\s*=)\s*["\'](?:https?:)?//'
                              r'(?:(?!</script>).)*</script>', re.I | re.S)


def on_post_page(output, page, config):
    """Offline: drop any script or stylesheet from another host (nbconvert's template links MathJax from a CDN;
    the labs have no math)."""
    return _FETCHING_SCRIPT.sub("", _EXTERNAL_CSS.sub("", _EXTERNAL_SCRIPT.sub("", output)))


def on_build_error(error):
    on_post_build(None)


def on_post_build(config):
    shutil.rmtree(_state.get("tmp", ""), ignore_errors=True)
    pool = _state.pop("pool", None)
    if pool:
        pool.shutdown()
    _state.clear()  # mkdocs serve: the next build runs everything again
