"""The docs site's build hook (mkdocs.yml: `hooks: [docs/hooks.py]`): the pages that must not drift from the code.

At build time it
- adds one page per catalogue bug at `bugs/<slug>/` from the registry (`sandbox.bugs.registry()`) and the bug
  module's own source (the page's text: docs/catalogue_pages.py); the page draws a real run of the broken variant,
  `python -m sandbox.repro SLUG --variant broken --json`, from its JSON (`RunResult.to_dict()`, the contract every
  tool reads) with the sandbox's own report, never by scraping what a terminal shows; the bugs run in two batches,
  each one process whose runs fork from one warm zygote (docs/bug_runs.py); a test session that has run them
  already (test_catalogue, the labs) passes its runs instead (`SANDBOX_SHARED_RUNS=DIR`), so each runs once
  per session;
- executes every lab (`labs/*.ipynb`, committed without outputs) in a real kernel, in parallel (docs/labs_run.py),
  and hands the executed copies to mkdocs-jupyter, which renders them under `labs/`; a test session that has
  executed them already passes its copies instead (`DOCS_EXECUTED_LABS=DIR`, tests/conftest.py), so each lab runs
  once per session;
- runs `examples/mismatch.py` on 4 ranks (`python -m sandbox.run --json`) for the home page's verdict and timeline;
- fills the `<!-- gen: NAME -->` markers of the hand-written pages (the CLI's real `--help` texts, README sections,
  the trace format from `sandbox/events.py`, the grouped bug index, the index of error messages from the front
  matter of docs/errors/*.md: docs/error_pages.py);
- strips any script a notebook template would load from another host (the site is offline).

`docs_queries()` (catalogue_pages) gives, per bug, the text a person would paste into the search box; the page of
that bug puts it verbatim at its top, and the browser test types it, as it types each error page's message.

Run the build from the repository root with the package importable (`.venv/bin/mkdocs build --strict`). While
writing pages, `DOCS_REUSE=DIR` keeps the build-time runs (executed labs, bug runs) in DIR and reuses those found
there: a rebuild then takes seconds. Never set it for a build that checks the labs (the tests do not).
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import glob
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import jinja2  # mkdocs' own templating: always there where this file runs
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bug_runs  # noqa: E402  docs/bug_runs.py: the catalogue's broken variants, several in one process
import catalogue_pages  # noqa: E402  docs/catalogue_pages.py, beside this file: the catalogue's pages
import diagram_pages  # noqa: E402  docs/diagram_pages.py: the Concepts page's pictures, from one real run
import error_pages  # noqa: E402  docs/error_pages.py: the index of error messages (docs/errors/)
import labs_run  # noqa: E402  docs/labs_run.py: a lab executed in a real kernel (the tests execute them the same way)
import route  # noqa: E402  docs/route.py: the learning path (Start here, the Labs menu)
import scores_page  # noqa: E402  docs/scores_page.py: "How well does it diagnose?", from the scoreboard's JSON
# tests/test_docs.py and tests/test_browser.py read these from the hook, as before the split
from catalogue_pages import bug_order, docs_queries, error_message, fence, lab_of  # noqa: E402,F401

from sandbox.bugs import registry  # noqa: E402  reading the registry imports no torch

log = logging.getLogger("mkdocs.plugins.dist_sandbox")
LABS_DIR = os.path.join(ROOT, "labs")
WORKERS = int(os.environ.get("DOCS_JOBS", "2"))

_state: dict = {}


# ------------------------------------------------------------------------------------------------- build-time runs

_env = labs_run.env  # the build's runs see what the labs' kernels see: no colour codes, a fixed width


def _run(cmd: list[str], timeout: float = 300) -> tuple[int, str]:
    p = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + (p.stderr if p.returncode not in (0, 1) else "")


def run_bugs(slugs: list, out_dir: str) -> dict:
    """The broken variants of `slugs`, each as `python -m sandbox.repro SLUG --variant broken --json --timeline
    ...`, answered one after another in one subprocess whose runs fork from one warm zygote (docs/bug_runs.py):
    {slug: its JSON, whether the timeline picture was drawn, what it printed on stderr}."""
    from sandbox.bugs import registry, unavailable

    out, todo = {}, []
    for slug in slugs:
        why = unavailable(registry()[slug])
        if why:  # a bug on simulated nodes, where they cannot be made: its page says so instead of a run
            out[slug] = {"rc": 2, "run": None, "unavailable": why, "stderr": "", "timeline": False, "seconds": 0.0}
        else:
            todo.append(slug)
    said = ""
    for slug in todo:  # a record read below is this batch's: one left by an earlier build (DOCS_REUSE) would not be
        with contextlib.suppress(FileNotFoundError):
            os.remove(bug_runs.record(out_dir, slug))
    try:
        p = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "bug_runs.py"), out_dir, *todo], cwd=ROOT,
                           env=_env(), capture_output=True, text=True, timeout=300 + 60 * len(todo))
        said = p.stderr
    except subprocess.TimeoutExpired as e:  # killed: the runs it finished are kept, on_files names the others
        said = f"(killed after {e.timeout:g} s) " + ((e.stderr or b"").decode(errors="replace")
                                                       if isinstance(e.stderr, bytes) else e.stderr or "")
    for slug in todo:
        try:
            with open(bug_runs.record(out_dir, slug), encoding="utf-8") as f:
                r = json.load(f)
        except (OSError, ValueError):  # the batch ended before this run did
            out[slug] = {"rc": -9, "run": None, "stderr": said[-3000:], "timeline": False, "seconds": 0.0}
            continue
        try:
            run = json.loads(r["stdout"])["variants"][0]
        except (ValueError, KeyError, IndexError):  # no JSON: the run itself failed; on_files names it with its stderr
            run = None
        out[slug] = {"rc": r["rc"], "run": run, "stderr": r["stderr"][-3000:],
                     "timeline": os.path.exists(bug_runs.timeline(out_dir, slug)), "seconds": r["seconds"]}
    return out


def run_home(out_dir: str) -> dict:
    """examples/mismatch.py on 4 ranks, run as `python -m sandbox.run -n 4 --json --timeline ...`: the home page's
    verdict, drawn from the JSON as the terminal draws it."""
    png = os.path.join(out_dir, "assets", "home-timeline.png")
    os.makedirs(os.path.dirname(png), exist_ok=True)
    p = subprocess.run([sys.executable, "-m", "sandbox.run", "-n", "4", "--json", "--timeline", png,
                        "examples/mismatch.py"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    try:
        output = catalogue_pages.report_text(json.loads(p.stdout))
    except ValueError:  # no JSON: the run itself failed; the page says so and the build log has why
        output = f"(python -m sandbox.run exited {p.returncode}: {p.stderr[-2000:]})"
    return {"rc": p.returncode, "output": output, "timeline": os.path.exists(png)}


def execute_lab(path: str, out_dir: str, jupyter_path: str) -> dict:
    """One lab, executed in its own kernel (docs/labs_run.py), into out_dir/labs/; or, under DOCS_EXECUTED_LABS, the
    copy a test session executed from the same source (tests/conftest.py), taken as it is."""
    dest = os.path.join(out_dir, "labs", os.path.basename(path))
    given = os.environ.get("DOCS_EXECUTED_LABS")
    if given:
        done = os.path.join(given, os.path.basename(path))
        if not os.path.exists(done):
            return {"rc": 1, "dest": dest, "seconds": 0.0,
                    "stderr": f"DOCS_EXECUTED_LABS={given} has no executed {os.path.basename(path)}"}
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(done, dest)
        return {"rc": 0, "dest": dest, "stderr": "", "seconds": 0.0}
    return labs_run.execute(path, dest, jupyter_path)


def start_jobs() -> None:
    """Start every build-time run at once, on a pool of DOCS_JOBS workers (2 by default); under DOCS_REUSE, only
    those whose result is not kept there."""
    tmp = tempfile.mkdtemp(prefix="dist-sandbox-docs-")
    reuse = os.environ.get("DOCS_REUSE")
    out = os.path.join(reuse, "gen") if reuse else os.path.join(tmp, "gen")
    kept = {}
    if reuse and os.path.exists(os.path.join(reuse, "results.json")):
        with open(os.path.join(reuse, "results.json"), encoding="utf-8") as f:
            kept = json.load(f)
    jupyter = labs_run.kernelspec(tmp)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS)
    labs = sorted(glob.glob(os.path.join(LABS_DIR, "*.ipynb")))
    todo = {"home": (run_home, out)}
    todo["diagrams"] = (diagram_pages.generate, out)
    # the labs take longest: queue them first
    for path in labs:
        todo["lab:" + os.path.basename(path)] = (execute_lab, path, out, jupyter)
    jobs = {}
    for key, (fn, *args) in todo.items():
        done = kept.get(key, {})
        if done.get("rc") == 0 or (key == "home" and done):
            jobs[key] = _done(kept[key])
        else:
            jobs[key] = pool.submit(fn, *args)
    bugs = [slug for slug in bug_order() if not kept.get("bug:" + slug, {}).get("run")]
    bugs.sort(key=lambda slug: -registry()[slug].nnodes)  # those across nodes take longest: one per batch
    for slug in bug_order():
        if slug not in bugs:
            jobs["bug:" + slug] = _done(kept["bug:" + slug])
    # the bugs in WORKERS batches, each one process with one warm zygote; each bug's result a future of its own
    for batch in (bugs[i::WORKERS] for i in range(WORKERS)):
        if batch:
            mine = {slug: concurrent.futures.Future() for slug in batch}
            jobs.update(("bug:" + slug, f) for slug, f in mine.items())
            pool.submit(run_bugs, batch, out).add_done_callback(functools.partial(_hand_out, mine))
    _state.update(tmp=tmp, out=out, pool=pool, jobs=jobs, t0=time.monotonic(), labs=labs, reuse=reuse)


def _done(value) -> concurrent.futures.Future:
    f = concurrent.futures.Future()
    f.set_result(value)
    return f


def _hand_out(futures: dict, batch: concurrent.futures.Future) -> None:
    """A batch of bug runs has ended: each bug's future gets its run, or the batch's exception."""
    err = batch.exception()
    for slug, f in futures.items():
        if err is not None:
            f.set_exception(err)
        else:
            f.set_result(batch.result()[slug])


def result(key: str) -> dict:
    return _state["jobs"][key].result()


# ------------------------------------------------------------------------------------------------------ the pages

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
    if name.startswith("diagram "):
        return diagram_pages.markdown(name[8:], result("diagrams"))
    if name == "catalogue":
        return catalogue_pages.catalogue_table(error_pages.page_for)
    if name == "home-bugs":
        return catalogue_pages.home_list()
    if name == "errors-index":
        return error_pages.index_table()
    if name.startswith("help "):
        return help_text(name[5:])
    if name.startswith("readme "):
        return readme_section(name[7:])
    if name == "events-doc":
        import sandbox.events
        return sandbox.events.__doc__.strip()
    if name == "labs":
        return route.markdown(prefix="")
    if name == "route":
        return route.markdown()
    if name.startswith("scores"):
        return scores_page.markdown(name)
    raise KeyError(f"unknown generated part {name!r}")


def _nb_title(path: str) -> str:
    nb = json.load(open(path, encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return os.path.basename(path)


def bug_page(slug: str) -> str:
    """A bug's page (docs/catalogue_pages.py) with its build-time run."""
    return catalogue_pages.bug_page(slug, result("bug:" + slug))


# ------------------------------------------------------------------------------------------------------ the events

def on_config(config):
    """Fill the nav's "Bug catalogue" section with one page per registry bug, in teaching order, "Error messages"
    with every page of docs/errors/, "Labs" with every lab, part by part in the order of the learning path
    (docs/route.py), and start the build-time runs."""
    bugs = registry()
    for item in config["nav"]:
        if isinstance(item, dict) and "Bug catalogue" in item:
            section = item["Bug catalogue"]
            section[:] = [x for x in section if not (isinstance(x, dict) and
                                                     any(str(v).startswith("bugs/") and v != "bugs/index.md"
                                                         for v in x.values()))]
            section += [{bugs[s].title: f"bugs/{s}/index.md"} for s in bug_order()]
        if isinstance(item, dict) and "Error messages" in item:
            section = item["Error messages"]
            section[:] = [x for x in section if not isinstance(x, dict)]
            section += [{p["title"]: f"errors/{name}"} for name, p in error_pages.error_pages().items()]
        if isinstance(item, dict) and "Labs" in item:
            section = item["Labs"]
            section[:] = [x for x in section if not (isinstance(x, dict) and
                                                     any(str(v).endswith(".ipynb") for v in x.values()))]
            section[:] = [x for x in section if not (isinstance(x, dict) and
                                                     any(isinstance(v, list) for v in x.values()))]
            section += route.nav(lambda lab: _nb_title(os.path.join(LABS_DIR, lab + ".ipynb")))
    if "jobs" not in _state:
        start_jobs()
    share_compiled_templates()
    return config


class _CompiledTemplates(jinja2.BytecodeCache):
    """Jinja bytecode in memory (each bucket is keyed by the template's name and file, and checked against its
    source's checksum, so a changed template is compiled again)."""

    def __init__(self):
        self.code: dict[str, bytes] = {}

    def load_bytecode(self, bucket):
        if bucket.key in self.code:
            bucket.bytecode_from_string(self.code[bucket.key])

    def dump_bytecode(self, bucket):
        self.code[bucket.key] = bucket.bytecode_to_string()


def share_compiled_templates() -> None:
    """mkdocs-jupyter makes an nbconvert exporter for every notebook, and each compiled its Jinja templates anew:
    457 compiles in a build of 28 labs, 6 s of 32. Environments of one exporter class, configured alike, now share
    their compiled templates (one cache per class: an HTML and a Markdown exporter may compile a template alike
    named differently). If nbconvert no longer makes its environment this way, the build goes on without it."""
    try:
        from nbconvert.exporters.templateexporter import TemplateExporter
    except ImportError:
        return
    make = TemplateExporter.__dict__.get("_create_environment")
    if make is None or getattr(make, "_shared", False):
        return
    caches: dict[type, _CompiledTemplates] = {}

    def _create_environment(self):
        env = make(self)
        if env.bytecode_cache is None:
            env.bytecode_cache = caches.setdefault(type(self), _CompiledTemplates())
        return env
    _create_environment._shared = True
    TemplateExporter._create_environment = _create_environment


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
        if key.startswith("bug:") and r["run"] is None and not r.get("unavailable"):
            failed.append(f"{key[4:]}: python -m sandbox.repro --json printed no run (exit {r['rc']}):\n{r['stderr']}")
    if _state["reuse"]:  # kept before the check: a failed run is run again next time, the others are not
        with open(os.path.join(_state["reuse"], "results.json"), "w", encoding="utf-8") as f:
            json.dump({k: fut.result() for k, fut in _state["jobs"].items()}, f)
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


# lunr 2.3.9, bundled in Material's search worker, keys the nodes of its token trie by label + child id with nothing
# between them (`TokenSet.prototype.toString`), so with digit labels two different nodes can get one key ("3"->12,
# "5"->7 and "3"->1, "2"->57 both give "031257"); its minimisation then merges them, the trie holds words the index
# does not ("66.3.0" beside "66.3"), and a query that reaches one ("6", or a pasted message with a 6 in it) throws
# inside the worker, which answers with no results at all. Numbers on this site (timings, ports) change every build,
# so which searches fail changed with them. A separator no token can contain (tokens are split on whitespace) makes
# the keys unambiguous.
LUNR_KEY = "e=e+s+o.id}return e"
LUNR_KEY_FIXED = 'e=e+s+o.id+" "}return e'


def fix_search_worker(site_dir: str) -> None:
    workers = glob.glob(os.path.join(site_dir, "assets", "javascripts", "workers", "search.*.min.js"))
    if not workers:
        raise RuntimeError("docs build: Material's search worker is not where it was (assets/javascripts/workers)")
    for path in workers:
        with open(path, encoding="utf-8") as f:
            js = f.read()
        if LUNR_KEY not in js and LUNR_KEY_FIXED not in js:
            raise RuntimeError(f"docs build: {path} no longer holds lunr's TokenSet key code; check whether the "
                               "digit-label collision is fixed upstream and drop docs/hooks.py's fix_search_worker")
        with open(path, "w", encoding="utf-8") as f:
            f.write(js.replace(LUNR_KEY, LUNR_KEY_FIXED))


def on_post_build(config):
    if config is not None:
        fix_search_worker(config["site_dir"])
    shutil.rmtree(_state.get("tmp", ""), ignore_errors=True)
    pool = _state.pop("pool", None)
    if pool:
        pool.shutdown()
    _state.clear()  # mkdocs serve: the next build runs everything again
