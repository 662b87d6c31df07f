"""The docs site builds strictly, offline, with a page for every catalogue bug and every lab executed.

One `mkdocs build --strict` (from the repository root, as CI runs it) into a temp dir, then checks on the HTML:
- the build exits 0 and logs no WARNING (strict turns warnings into a failure; this also catches one logged by a
  plugin that strict does not count);
- every bug of `sandbox.bugs.registry()` has `bugs/<slug>/index.html` with its error message near the top (the
  query the browser test types, `docs_queries()`), its real broken and fixed code with the BUG / FIX lines, the
  diagnosis of a real run, its timeline picture and a link to its lab; its search entry is boosted;
- every lab in `labs/` has a page showing executed output;
- every page of docs/errors/ is built with its message as its first heading, boosted in search, listed in the
  index of error messages and in the navigation, and links the catalogue pages that reproduce its causes;
- the bug index puts every bug of the registry under the group of what a person sees first (from its record), and
  the home page lists every bug;
- no page loads anything from another host: no script, stylesheet, image, frame or font from http(s)://, no
  inline script importing one (links for a reader to follow, `<a href>`, are fine);
- the CLI reference holds the real `--help` texts.

The build takes 1-2 minutes (it executes every lab and runs every bug's broken variant); its time is printed.
"""
import glob
import html
import json
import os
import re
import subprocess
import sys

import pytest
from conftest import DOCS_PACKAGES, ROOT, need

from sandbox.bugs import registry

need(*DOCS_PACKAGES)

sys.path.insert(0, os.path.join(ROOT, "docs"))
import catalogue_pages  # noqa: E402  docs/catalogue_pages.py: group_of(), GROUPS
import error_pages  # noqa: E402  docs/error_pages.py: error_pages(), error_queries()
import hooks  # noqa: E402  docs/hooks.py: docs_queries(), error_message(), lab_of()

LOCAL = re.compile(r"^(?:https?:)?//(?:127\.0\.0\.1|localhost)(?:[:/]|$)", re.I)


@pytest.fixture(scope="module")
def site(docs_site):
    return docs_site  # built once for the session (tests/conftest.py)


def _page(site, path):
    full = os.path.join(site["dir"], path)
    assert os.path.isfile(full), f"no {path} in the built site"
    with open(full, encoding="utf-8") as f:
        return f.read()


def _article(page_html):
    """The page's own content (not the nav or the table of contents around it)."""
    m = re.search(r"<article\b.*?</article>", page_html, re.S)
    assert m, "no <article> in the page"
    return m.group(0)


def _text(page_html):
    return html.unescape(re.sub(r"<[^>]+>", " ", page_html))


def test_build_is_strict_and_quiet(site):
    warnings = [line for line in site["log"].splitlines() if re.search(r"\bWARNING\b", line)]
    assert not warnings, "\n".join(warnings)


def test_every_bug_has_its_page(site):
    queries = hooks.docs_queries()
    bugs = registry()
    assert set(queries) == set(bugs)
    for slug, bug in bugs.items():
        page = _page(site, f"bugs/{slug}/index.html")
        text = re.sub(r"\s+", " ", _text(_article(page)))
        assert queries[slug] and re.sub(r"\s+", " ", queries[slug]) in text, slug
        # the message sits at the top: before the root-cause chain
        assert text.index(re.sub(r"\s+", " ", queries[slug])) < text.index("The root-cause chain"), slug
        assert bug.title in text, slug
        raw = html.unescape(re.sub(r"<[^>]+>", "", _article(page)))  # code keeps its own spacing
        for part in ("Symptom.", "Root cause.", "Fix.", "def broken(", "def fixed(", "What the sandbox says",
                     "How to recognise it in your own code"):
            assert part in raw, f"{slug}: no {part!r}"
        assert re.search(r"(#|\"\"\")\s*BUG", raw) and re.search(r"(#|\"\"\")\s*FIX", raw), slug
        assert 'class="hll"' in page, f"{slug}: the BUG/FIX lines are not highlighted"
        kinds = (bug.broken.verdict,) if isinstance(bug.broken.verdict, str) else bug.broken.verdict
        assert re.search(r"\b(" + "|".join(k.upper() for k in kinds) + r")\b", text), \
            f"{slug}: the page shows no {kinds} verdict of a real run: " + text[text.find("What the sandbox says"):][:3000]
        assert os.path.isfile(os.path.join(site["dir"], "bugs", slug, "timeline.png")), slug
        assert 'src="timeline.png"' in page, slug
        lab = hooks.lab_of(slug)
        if lab:
            name = os.path.splitext(os.path.basename(lab))[0]
            assert f'href="../../labs/{name}/"' in page, f"{slug}: no link to its lab"


def test_bug_pages_are_boosted_in_search(site):
    with open(os.path.join(site["dir"], "search", "search_index.json"), encoding="utf-8") as f:
        index = json.load(f)
    boosted = {d["location"].split("/")[1] for d in index["docs"]
               if d["location"].startswith("bugs/") and d.get("boost", 1) > 1}
    assert boosted >= set(registry())


def test_the_search_worker_keys_its_token_trie_unambiguously(site):
    """docs/hooks.py's fix of lunr's trie keys is in the built worker (without it, a search reaching a digit-led word
    could answer nothing at all, depending on the numbers a build happened to print), and its twin check holds: the
    unfixed code is gone."""
    (worker,) = glob.glob(os.path.join(site["dir"], "assets", "javascripts", "workers", "search.*.min.js"))
    js = open(worker, encoding="utf-8").read()
    assert 'e=e+s+o.id+" "}return e' in js and "e=e+s+o.id}return e" not in js


def test_every_lab_is_rendered_with_executed_output(site):
    labs = sorted(glob.glob(os.path.join(ROOT, "labs", "*.ipynb")))
    assert labs
    for path in labs:
        name = os.path.splitext(os.path.basename(path))[0]
        page = _page(site, f"labs/{name}/index.html")
        outputs = re.findall(r'class="[^"]*jp-OutputArea-output', page)
        assert len(outputs) >= 2, f"{name}: {len(outputs)} output areas; was it executed?"


_TAG = re.compile(r"<(script|link|img|iframe|source|video|audio|embed|object|input)\b([^>]*)>", re.I)
_ATTR = re.compile(r"\b(src|href|data|srcset|poster)\s*=\s*[\"']?([^\"'\s>]+)", re.I)


def external_requests(page: str) -> list[str]:
    """What a page would fetch from another host: a script, stylesheet, image, frame or font by URL, an inline
    script's import, a CSS url(). Links for a reader to follow (<a href>) are not requests."""
    found = []
    for m in _TAG.finditer(page):
        for a in _ATTR.finditer(m.group(2)):
            url = a.group(2)
            if re.match(r"^(?:https?:)?//", url, re.I) and not LOCAL.match(url):
                found.append(f"<{m.group(1)} {a.group(1)}={url}>")
    for m in re.finditer(r"<script\b[^>]*>(.*?)</script>", page, re.I | re.S):
        for url in re.findall(r"""(?:import\s*\(|from)\s*["']((?:https?:)?//[^"']+)""", m.group(1)):
            if not LOCAL.match(url):
                found.append(f"a script imports {url}")
    for url in re.findall(r"""(?:url\(\s*["']?|@import\s+["'])((?:https?:)?//[^"')]+)""", page):
        if not LOCAL.match(url):
            found.append(f"css {url}")
    return found


def test_the_offline_check_can_fail():
    assert external_requests('<script src="https://cdn.example.org/x.js"></script>')
    assert external_requests('<link rel="stylesheet" href="//fonts.googleapis.com/css?family=Roboto">')
    assert external_requests('<script type="module">const m = await import("https://cdnjs.cloudflare.com/m.mjs")'
                             '</script>')
    assert external_requests("<style>@font-face { src: url(https://fonts.gstatic.com/r.woff2) }</style>")
    assert not external_requests('<a href="https://pytorch.org/docs/">docs</a><img src="timeline.png">'
                                 '<script src="http://127.0.0.1:8000/x.js"></script>')


def test_no_request_to_another_host(site):
    found = []
    for path in glob.glob(os.path.join(site["dir"], "**", "*.html"), recursive=True) + \
            glob.glob(os.path.join(site["dir"], "**", "*.css"), recursive=True):
        with open(path, encoding="utf-8") as f:
            found += [f"{os.path.relpath(path, site['dir'])}: {x}" for x in external_requests(f.read())]
    assert not found, "\n".join(sorted(set(found))[:40])


def test_cli_reference_is_the_real_help(site):
    text = _text(_page(site, "cli/index.html"))
    for module in ("sandbox.run", "sandbox.repro", "sandbox.diagnose"):
        p = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, NO_COLOR="1"))
        assert p.returncode == 0, p.stderr
        assert p.stdout.splitlines()[0].strip() in text, module


def test_home_shows_a_diagnosed_hang(site):
    page = _page(site, "index.html")
    assert "HANG [collective_mismatch]" in _text(page)
    assert 'src="assets/home-timeline.png"' in page
    assert os.path.isfile(os.path.join(site["dir"], "assets", "home-timeline.png"))


def _words(text):
    return re.sub(r"\s+", " ", text).strip()


def test_every_error_page_is_built(site):
    pages = error_pages.error_pages()
    assert len(pages) >= 12, sorted(pages)
    with open(os.path.join(site["dir"], "search", "search_index.json"), encoding="utf-8") as f:
        index = json.load(f)
    boost = {d["location"]: d.get("boost", 1) for d in index["docs"]}
    listing = _text(_article(_page(site, "errors/index.html")))
    nav = _page(site, "index.html")
    for name, meta in pages.items():
        slug = name[:-3]
        page = _page(site, f"errors/{slug}/index.html")
        h1 = re.search(r"<h1[^>]*>(.*?)</h1>", page, re.S)
        assert h1, name
        # the first heading is the message as printed (the long DETAIL one is cut with "...")
        head = _words(_text(re.sub(r'<a class="headerlink".*?</a>', "", h1.group(1))))
        first = _words(meta["message"]).split(" ...")[0][:60]
        assert head.replace("`", "").startswith(first.replace("`", "")[:60]) or first[:60] in head, (name, head)
        text = _text(_article(page))
        for part in ("Which rank to look at first", "What causes it", "Find the culprit", "sandbox"):
            assert part in text, f"{name}: no {part!r}"
        links = re.findall(r'href="\.\./\.\./bugs/([a-z0-9-]+)/"', page)
        assert links or "No bug of the catalogue" in text, f"{name} links no catalogue page"
        assert set(links) <= set(registry()), f"{name} links bugs that do not exist: {set(links) - set(registry())}"
        assert boost.get(f"errors/{slug}/", 1) > 1, f"{name} is not boosted in search"
        assert meta["title"] in listing, f"the index of error messages does not list {name}"
        assert f'href="errors/{slug}/"' in nav, f"{name} is not in the navigation"


def test_error_page_front_matter_is_checked(tmp_path, monkeypatch):
    """A page without its message or with an unknown group is refused, naming the file (the check can fail)."""
    (tmp_path / "bad.md").write_text("---\ntitle: x\ngroup: nowhere\n---\n# x\n", encoding="utf-8")
    monkeypatch.setattr(error_pages, "ERRORS_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="bad.md"):
        error_pages.error_pages()


def test_the_bug_index_groups_every_bug(site):
    bugs = registry()
    article = _article(_page(site, "bugs/index.html"))
    heads = {head: key for key, head, _ in catalogue_pages.GROUPS}
    # split the page at its group headings; each bug's link must sit under the group of its record
    parts = re.split(r"<h2[^>]*>(.*?)</h2>", article, flags=re.S)
    found = {}
    for title, body in zip(parts[1::2], parts[2::2]):
        key = heads.get(_words(_text(re.sub(r'<a class="headerlink".*?</a>', "", title))))
        for slug in re.findall(r'href="([a-z0-9-]+)/"', body):
            if key and slug in bugs:
                found.setdefault(slug, set()).add(key)
    for slug, bug in bugs.items():
        assert found.get(slug) == {catalogue_pages.group_of(bug)}, (slug, found.get(slug))
    home = _article(_page(site, "index.html"))
    missing = [s for s in bugs if f'href="bugs/{s}/"' not in home]
    assert not missing, f"the home page does not list {missing}"


def test_groups_come_from_the_record():
    """What a person sees first follows the broken variant's record (the rule can fail: each branch is taken)."""
    from sandbox.bugs import Bug, Expect

    def bug(**kw):
        return Bug(slug="x", title="x", source="x", symptom="x", broken=Expect(**kw), fixed=Expect())
    assert catalogue_pages.group_of(bug(verdict="error", error="Timed out waiting \\d+ms")) == "timeout"
    assert catalogue_pages.group_of(bug(verdict="error", kind="straggler")) == "timeout"
    assert catalogue_pages.group_of(bug(verdict=("crash", "hang"), error="size")) == "error"
    assert catalogue_pages.group_of(bug(verdict=("hang", "crash"))) == "hang"
    assert catalogue_pages.group_of(bug(verdict="ok")) == "wrong"


def test_the_route_takes_every_lab_once():
    """docs/route.py, the learning path the Start-here page and the Labs menu are built from, names every notebook
    in labs/ exactly once, and nothing that is not one."""
    import route  # docs/route.py
    names = [s.lab for s in route.steps()]
    assert len(names) == len(set(names)), names
    notebooks = {os.path.basename(p)[:-6] for p in glob.glob(os.path.join(ROOT, "labs", "*.ipynb"))}
    assert set(names) == notebooks, (sorted(notebooks - set(names)), sorted(set(names) - notebooks))
    assert all(s.minutes > 0 and s.objective.endswith(".") for s in route.steps())


def test_start_here_shows_the_route_and_the_menu_follows_it(site):
    """The Start-here page lists every lab with its time and objective, part by part; the Labs menu has the same
    parts in the same order."""
    import route
    page = open(os.path.join(site["dir"], "start-here", "index.html"), encoding="utf-8").read()
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    text = re.sub(r"\s+", " ", text)
    last = -1
    for part in route.ROUTE:
        at = text.find(part.title)
        assert at > last, f"part {part.title!r} missing or out of order on the Start-here page"
        last = at
        for s in part.steps:
            assert f"{s.lab} {s.minutes} min {s.objective}" in text, s.lab
    home = open(os.path.join(site["dir"], "index.html"), encoding="utf-8").read()
    nav = re.findall(r'<label class="md-nav__link"[^>]*>\s*<span class="md-ellipsis">\s*([^<]+?)\s*</span>', home)
    parts = [t for t in nav if any(t == html.escape(p.title, quote=False) for p in route.ROUTE)]
    assert parts == [html.escape(p.title, quote=False) for p in route.ROUTE], nav


def test_the_scores_page_shows_the_committed_scoreboard(site):
    """The page "How well does it diagnose?" is built from benchmarks/scoreboard.json (and the NCCL one): every tool's
    recall, precision, F1, helpfulness and noise as the JSON has them, when it was made and with what, and one row
    per case of the corpus."""
    page = open(os.path.join(site["dir"], "scores", "index.html"), encoding="utf-8").read()
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", _article(page))))
    assert "How well does it diagnose?" in text
    path = os.path.join(ROOT, "benchmarks", "scoreboard.json")
    if not os.path.exists(path):
        assert "has not been run yet" in text
        return
    import datetime
    data = json.load(open(path, encoding="utf-8"))
    made = datetime.datetime.strptime(data["made"], "%Y-%m-%dT%H:%M:%SZ")
    assert data["torch"] in text and f"{made.day} {made:%B %Y}" in text and data["command"] in text
    for tool, s in data["scores"].items():
        row = " | ".join(f"{s[k]:.2f}" if s[k] is not None else "–" for k in ("recall", "precision", "f1"))
        figures = re.escape(row).replace(r"\ \|\ ", r"\s+")
        assert re.search(figures, text), (tool, row)
    for case in data["corpus"]:
        assert case in text, case
    nccl = os.path.join(ROOT, "benchmarks", "scoreboard-nccl.json")
    if os.path.exists(nccl):
        gpu = json.load(open(nccl, encoding="utf-8"))
        assert gpu["torch"] in text and gpu["machine"].split(", ")[-1] in text  # the GPUs it ran on
