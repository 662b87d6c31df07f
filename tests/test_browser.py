"""The docs site in a real browser, as a reader meets it: built with `mkdocs build --strict`, served on 127.0.0.1,
and driven by headless Chromium (Debian's `chromium` package, through Playwright for Python; never Playwright's own
browser download). Every page of the site loads with status 200, logs no console error and asks no other host for
anything (no web fonts, no CDN); every lab page shows its executed output; and the site's own search box, used as a
person uses it, lists the right bug page first for each bug's error message pasted (one test per bug of the
registry), and each error page of docs/errors/ first for its message pasted whole, as torch prints it (one test per
page), and for each short form of it typed key by key (`typed:` in the page's front matter; Material searches at
every key, so these also see an answer to an earlier prefix never shown for the whole query).

Screenshots of the home page, one bug page and one search go to $SANDBOX_SCREENSHOTS, by default `build/screenshots/`
(ignored by git), as PNG. The browser, the driver and the server are closed whatever happens, and the last teardown
checks that no process or listening socket of ours is left.
"""
import functools
import http.server
import importlib.util
import json
import os
import re
import sys
import threading
import urllib.parse

import pytest

from conftest import DOCS_PACKAGES, ROOT, leftovers, listening_ports, need
from sandbox.bugs import registry

need("playwright", *DOCS_PACKAGES)  # Playwright for Python drives Debian's Chromium; the site is built first

CHROMIUM = "/usr/bin/chromium"
# headless, and nothing of Chromium's own that phones home (updates, sync, safe-browsing lists, QUIC probes)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
SHOTS = os.environ.get("SANDBOX_SCREENSHOTS") or os.path.join(ROOT, "build", "screenshots")
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
WAIT_MS = 30_000        # the most any one page load, selector or search may take
BUGS = registry()


def _docs_module(name: str):
    """A module of docs/ (hooks.py, error_pages.py), loaded from its file as mkdocs loads the hook."""
    sys.path.insert(0, os.path.join(ROOT, "docs"))
    spec = importlib.util.spec_from_file_location(f"docs_{name}", os.path.join(ROOT, "docs", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ERRORS = _docs_module("error_pages").error_queries()  # {"errors/<name>/": the message, whole}
TYPED = _docs_module("error_pages").typed_queries()  # [("errors/<name>/", a short form a person types)]


# -- the site, its server, the browser -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site(docs_site):
    """The site built strictly, once for the session (tests/conftest.py): its path."""
    return docs_site["dir"]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test reports what matters; a line per request would bury it
        pass


@pytest.fixture(scope="module")
def base(site):
    """The site served on 127.0.0.1 on a port the OS picks: its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=site))
    thread = threading.Thread(target=server.serve_forever, name="docs-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module", autouse=True)
def nothing_left():
    """Set up first, so torn down last: after the browser, its driver and the server have closed, no process or
    listening socket of ours is left."""
    yield
    assert leftovers() == [], "processes left after the browser closed"
    assert listening_ports() == set(), "sockets left listening after the server closed"


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium from Debian's package, and Playwright's driver; both closed whatever happens."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"no {CHROMIUM}: install Debian's chromium (apt-get install -y chromium), as the README's "
                    "set-up command does")
    from playwright.sync_api import sync_playwright
    pw = sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, timeout=WAIT_MS)
        try:
            yield b
        finally:
            b.close()
    finally:
        pw.stop()


class Visit:
    """A fresh browser context that records, for every page it opens, each request (aborting any to another host,
    so the test never depends on the network), console errors, page errors and failed local responses."""

    def __init__(self, browser, index=None):
        self.index = index  # (url, body): the search index answered with `body` (the tour's; see `tour`)
        self.requests, self.errors = [], []
        self.ctx = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
        self.ctx.set_default_timeout(WAIT_MS)
        self.ctx.on("request", lambda r: self.requests.append(r.url))
        self.finished = []  # requests answered or failed, since the last page opened
        self.ctx.on("requestfinished", lambda r: self.finished.append(r.url))
        self.ctx.on("requestfailed", lambda r: self.finished.append(r.url))
        self.ctx.on("response", lambda r: r.status >= 400 and self.errors.append(f"HTTP {r.status} {r.url}"))
        self.ctx.route("**/*", self._route)
        self.ctx.add_init_script(_SPY_ON_SEARCH)

    def _route(self, route):
        if _foreign(route.request.url):
            route.abort()
        elif self.index is not None and route.request.url == self.index[0]:
            route.fulfill(status=200, content_type="application/json", body=self.index[1])
        else:
            route.continue_()

    def open(self, url, tab=None):
        """Open `url` in a new page of this context, or in `tab` (a page of it, as a reader follows a link), and
        wait until it has settled: (page, response)."""
        self.finished.clear()
        page = tab or self.tab()
        res = page.goto(url, wait_until="commit")
        self.settle(page)
        return page, res

    def tab(self):
        """A new page of this context, whose console errors and uncaught exceptions are recorded."""
        page = self.ctx.new_page()
        page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text} ({m.location})"))
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        return page

    def settle(self, page):
        """Wait until the page has loaded and what it loads after `load` has come: the search index, which
        Material's search worker fetches once the page is up (the last request a page of this site makes; a
        request to another host made before it is recorded too). Bounded by WAIT_MS."""
        page.wait_for_load_state("load")
        waited_ms = 0
        while not any(u.endswith("/search/search_index.json") for u in self.finished):
            if waited_ms >= WAIT_MS:
                raise TimeoutError(f"the search index was not fetched within {WAIT_MS} ms of `load`")
            page.wait_for_timeout(20)  # the browser's clock: events are delivered meanwhile
            waited_ms += 20

    def foreign(self):
        return sorted({u for u in self.requests if _foreign(u)})

    def problems(self) -> list:
        """What went wrong since the records were last cleared: errors and requests to another host."""
        return self.errors + [f"request to another host: {u}" for u in self.foreign()]

    def clear(self):
        self.errors.clear()
        self.requests.clear()

    def close(self):
        self.ctx.close()


@pytest.fixture
def visit(browser):
    v = Visit(browser)
    try:
        yield v
    finally:
        v.close()


def _foreign(url: str) -> bool:
    """Does this request go to another host than the site's own? (data: and blob: URLs stay in the page.)"""
    u = urllib.parse.urlsplit(url)
    return u.scheme not in ("data", "blob", "about") and u.hostname not in LOCAL_HOSTS


def pages(site) -> list:
    """Every page of the built site, as a path relative to its root ("" is the home page); 404.html is not one."""
    out = []
    for d, _, files in os.walk(site):
        if "index.html" in files:
            rel = os.path.relpath(d, site).replace(os.sep, "/")
            out.append("" if rel == "." else rel + "/")
    return sorted(out)


def lab_pages(site) -> list:
    """The pages under labs/ that are notebooks rendered by mkdocs-jupyter."""
    out = []
    for p in pages(site):
        if p.startswith("labs/"):
            with open(os.path.join(site, p, "index.html"), encoding="utf-8") as f:
                if "jupyter-wrapper" in f.read():
                    out.append(p)
    return out


# -- every page --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tour(site, base, browser):
    """Every page of the site opened once, one after another in one tab, as a reader follows links: {path:
    {"problems": [...], "outputs": (count, text) of a lab page's executed output areas, else None}}. The page tests
    below read it: a page is loaded once. (On 2 cores, measured as the machine's busy time: a new tab per page, three
    at once, cost 87 CPU-s and 45 s; a tab each, three at once, 73 CPU-s and 37 s; one tab, 60 CPU-s and 31 s.)

    Each page still fetches the search index from where the site puts it (a page that asked elsewhere would get the
    server's 404), but is answered with an index of no documents, the site's own search config: Material's search
    worker builds its index from the whole file (1.6 MB) on every page it opens, which was 25 of those 60 CPU-s
    (86 pages: 59 CPU-s and 30 s with the real index, 33 CPU-s and 20 s without). The search tests below load the
    real one."""
    labs = set(lab_pages(site))
    seen = {}
    with open(os.path.join(site, "search", "search_index.json"), encoding="utf-8") as f:
        config = json.load(f)["config"]
    v = Visit(browser, index=(base + "search/search_index.json", json.dumps({"config": config, "docs": []})))
    tab = v.tab()
    try:
        for p in pages(site):
            try:
                page, res = v.open(base + p, tab)
                bad = [] if res is not None and res.status == 200 else [f"status {res and res.status}"]
            except Exception as e:  # noqa: BLE001  a page that never settles is a problem of that page
                bad = [f"did not finish loading: {str(e).splitlines()[0]}"]
            outputs = None
            if p in labs:
                areas = tab.locator(".jp-OutputArea-output")
                outputs = (areas.count(), "\n".join(areas.all_inner_texts()) if areas.count() else "")
            seen[p] = {"problems": bad + v.problems(), "outputs": outputs}
            v.clear()
    finally:
        v.close()
    return seen


def test_every_page_loads_offline_without_errors(tour):
    assert "" in tour, "the site has no home page"
    problems = {p or "/": seen["problems"] for p, seen in tour.items() if seen["problems"]}
    assert not problems, "\n".join(f"{p}: {'; '.join(b)}" for p, b in problems.items())


def test_the_checks_can_fail(base, visit):
    """The recorders see what they must: a console error, an uncaught exception, and a request to another host from
    the page and from a web worker (where Material's search runs), each aborted before it leaves the machine."""
    page, _ = visit.open(base)
    page.evaluate("""() => {
        console.error("planted");
        setTimeout(() => { throw new Error("planted uncaught"); });
        fetch("http://fonts.example.invalid/page.woff2").catch(() => 0);
        const src = 'fetch("https://cdn.example.invalid/worker.js").catch(() => 0)';
        new Worker(URL.createObjectURL(new Blob([src], {type: "text/javascript"})));
    }""")
    want = ["http://fonts.example.invalid/page.woff2", "https://cdn.example.invalid/worker.js"]

    def seen():
        return (visit.foreign() == want and any(e.startswith("console: planted") for e in visit.errors)
                and any("planted uncaught" in e for e in visit.errors))
    waited_ms = 0
    while not seen() and waited_ms < WAIT_MS:  # the events are on their way; the browser's clock, bounded
        page.wait_for_timeout(50)
        waited_ms += 50
    assert seen(), (visit.foreign(), visit.errors)
    page.close()


def test_labs_show_executed_output(site, tour):
    labs = lab_pages(site)
    stems = sorted(os.path.splitext(n)[0] for n in os.listdir(os.path.join(ROOT, "labs")) if n.endswith(".ipynb"))
    missing = [s for s in stems if not any(s in p for p in labs)]
    assert not missing, f"labs without a page under labs/: {missing} (lab pages: {labs})"
    empty = []
    for p in labs:
        count, text = tour[p]["outputs"]
        # a bug lab's runs end in a verdict, a build-it-yourself lab prints its checks and measures; an unexecuted
        # lab shows no output at all
        if not re.search(r"(?i)\b(ok|hang|error|crash|timeout|right|all_reduce|ms|us)\b", text):
            empty.append(f"{p}: {count} output areas, {text[:200]!r}")
    assert not empty, "lab pages without executed output:\n" + "\n".join(empty)


def test_screenshots(site, base, visit):
    os.makedirs(SHOTS, exist_ok=True)
    bug_pages = [p for p in pages(site) if p.startswith("bugs/") and p.count("/") == 2]
    assert bug_pages, "the site has no bug page"
    one = "bugs/kv-sync/" if "bugs/kv-sync/" in bug_pages else bug_pages[0]
    for p, name in (("", "home.png"), (one, f"bug-{one.split('/')[1]}.png")):
        page, _ = visit.open(base + p)
        page.screenshot(path=os.path.join(SHOTS, name), full_page=True)
        page.close()
        assert os.path.getsize(os.path.join(SHOTS, name)) > 10_000, name


def test_the_learning_path_pages_show_their_pictures(site, base, visit):
    """The pages a new learner meets first, as a browser shows them: Start here (every lab of the route linked),
    Concepts (a diagram per primitive and the ring all-reduce, every picture loaded and drawn, not a broken image)
    and a build-it-yourself lab (its executed output and its timeline). Screenshots of each go to SHOTS."""
    os.makedirs(SHOTS, exist_ok=True)
    sys.path.insert(0, os.path.join(ROOT, "docs"))
    import route  # docs/route.py

    for p, name in (("start-here/", "start-here.png"), ("concepts/", "concepts.png"),
                    ("labs/22_data_parallel/", "lab-22.png")):
        page, res = visit.open(base + p)
        assert res is not None and res.status == 200, p
        # every picture decoded with a size: a missing file or a broken PNG has naturalWidth 0
        sizes = page.evaluate("() => Array.from(document.images).map(i => [i.getAttribute('src'), i.naturalWidth])")
        assert all(w > 0 for _, w in sizes), (p, [s for s, w in sizes if not w])
        if p == "start-here/":
            links = page.evaluate("() => Array.from(document.querySelectorAll('a')).map(a => a.getAttribute('href'))")
            for step in route.steps():
                assert any(step.lab in (h or "") for h in links), f"Start here does not link {step.lab}"
        if p == "concepts/":
            drawn = [s for s, _ in sizes if "diagram" in (s or "")]
            assert len(drawn) >= 9, sizes  # one per primitive (8 collectives and send/recv) and the ring
        if p.startswith("labs/"):
            assert len(sizes) >= 1, "the lab shows no picture (its timeline)"
        page.screenshot(path=os.path.join(SHOTS, name), full_page=True)
        page.close()
        assert os.path.getsize(os.path.join(SHOTS, name)) > 10_000, name
        assert not visit.errors, (p, visit.errors)


# -- search ------------------------------------------------------------------------------------------------------

# Material's search runs in a web worker: the page posts {type: 2, data: query} and the worker answers each in order
# with {type: 3, data: {items}}. Counting both tells when the answer to the last keystroke has come, so the test reads
# the results of the whole message, not of a prefix that happened to be on screen. The worker says {type: 1} once it
# has built the index from search_index.json; a query answered before that is answered with no results at all (as
# the worker's own catch does), so the test waits for it, as a reader's next keystroke would.
_SPY_ON_SEARCH = """
(() => {
  const Native = window.Worker;
  window.__search = {asked: 0, answered: 0, last: null, query: null, ready: false};
  window.Worker = class extends Native {
    constructor(...a) {
      super(...a);
      this.addEventListener("message", e => {
        if (e.data && e.data.type === 1) { window.__search.ready = true; }
        if (e.data && e.data.type === 3) { window.__search.answered++; window.__search.last = e.data.data; }
      });
    }
    postMessage(m, ...rest) {
      if (m && m.type === 2) { window.__search.asked++; window.__search.query = m.data; }
      return super.postMessage(m, ...rest);
    }
  };
})();
"""


@functools.lru_cache(maxsize=None)
def queries() -> dict:
    """slug -> the error message a person would paste: docs/hooks.py's docs_queries(), else from the registry."""
    hooks = os.path.join(ROOT, "docs", "hooks.py")
    if os.path.exists(hooks):
        spec = importlib.util.spec_from_file_location("docs_hooks", hooks)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if hasattr(mod, "docs_queries"):
            return mod.docs_queries()
    out = {}
    for slug, bug in BUGS.items():
        text = (bug.broken.error or "").split("|")[0] or bug.symptom
        out[slug] = re.sub(r"\s+", " ", re.sub(r"[\\^$*+?()\[\]{}]|\.\.\.", " ", text)).strip()
    return out


def search(page, query: str, paste: bool = False) -> list:
    """Type `query` into the site's open, empty search box as a person would (or paste it, then press End: Material
    searches on keyup, so a paste is searched when the key comes up); the result links in the order shown."""
    page.wait_for_function("() => window.__search.ready", timeout=WAIT_MS)
    if paste:
        page.keyboard.insert_text(query)
        page.keyboard.press("End")
    else:
        page.keyboard.type(query)
    page.wait_for_function("q => window.__search.query === q && window.__search.answered === window.__search.asked",
                           arg=query, timeout=WAIT_MS)
    first = page.evaluate("() => { const i = window.__search.last.items; return i.length ? i[0][0].location : null }")
    if first is None:
        return []
    # The answer is rendered on a later frame: wait until the list shows its first page first. (Results are grouped
    # by page, the page's own link on top even when a section of it matched; links gain a ?h= for highlighting.)
    page.wait_for_function("""loc => {
        const a = document.querySelector(".md-search-result__list a.md-search-result__link");
        return !!a && new URL(a.href).pathname === new URL(loc, document.baseURI).pathname }""", arg=first, timeout=WAIT_MS)
    return page.eval_on_selector_all(".md-search-result__list > li > a.md-search-result__link", "as => as.map(a => a.href)")


class Searcher:
    """One page of the site kept open for the search tests, as a reader searches one message after another: its
    worker builds the index once. Each search starts from the open search box emptied; a search that fails drops
    the page, and the next one opens a fresh one."""

    def __init__(self, browser, base):
        self.visit, self.base, self._page = Visit(browser), base, None

    def __call__(self, query: str, paste: bool = False) -> list:
        if self._page is None:
            self._page, _ = self.visit.open(self.base)
        page = self._page
        self.visit.clear()
        try:
            if not page.evaluate("() => document.querySelector('#__search').checked"):
                page.keyboard.press("/")  # opens the search box; after a search it stays open, as for a reader
            box = page.locator("input.md-search__input")
            box.wait_for(state="visible")
            box.fill("")  # the last message selected and deleted
            return search(page, query, paste=paste)
        except Exception:
            self.drop()
            raise

    def drop(self):
        if self._page is not None:
            self._page.close()
            self._page = None

    @property
    def page(self):
        """The open page (None after a failed search dropped it)."""
        return self._page

    def problems(self) -> list:
        """What went wrong in the page while it searched."""
        return self.visit.problems()


@pytest.fixture(scope="module")
def searcher(browser, base):
    s = Searcher(browser, base)
    try:
        yield s
    finally:
        s.drop()
        s.visit.close()


@pytest.mark.parametrize("slug", sorted(BUGS))
def test_search_finds_the_bug_page_first(slug, searcher):
    qs = queries()
    assert slug in qs, f"docs_queries() has no error message for {slug}"
    links = searcher(qs[slug], paste=True)  # as a reader brings a message: pasted (typing is the short forms' test)
    if slug == "cross-device":  # what a reader sees, for the closing note
        os.makedirs(SHOTS, exist_ok=True)
        searcher.page.screenshot(path=os.path.join(SHOTS, f"search-{slug}.png"))
    paths = [urllib.parse.urlsplit(u).path for u in links]
    assert paths and paths[0] == f"/bugs/{slug}/", (
        f"searching {qs[slug]!r} lists first {paths[0] if paths else 'nothing'}; the first five: {paths[:5]}")
    assert searcher.problems() == []


@pytest.mark.parametrize("location", sorted(ERRORS))
def test_search_finds_the_error_page_first(location, searcher):
    """The message pasted whole, as torch prints it (with a real run's numbers), lists its page first."""
    links = searcher(ERRORS[location], paste=True)
    paths = [urllib.parse.urlsplit(u).path for u in links]
    assert paths and paths[0] == "/" + location, (
        f"pasting {ERRORS[location]!r} lists first {paths[0] if paths else 'nothing'}; the first five: {paths[:5]}")
    assert searcher.problems() == []


@pytest.mark.parametrize("location, query", TYPED, ids=[q for _, q in TYPED])
def test_search_finds_the_error_page_first_for_the_short_form_a_person_types(location, query, searcher):
    """`RuntimeError: Connection closed by peer`, typed, lists its page first, not a bug page whose heading quotes
    those words (several bugs raise it: the page lists them all)."""
    links = searcher(query)
    paths = [urllib.parse.urlsplit(u).path for u in links]
    assert paths and paths[0] == "/" + location, (
        f"typing {query!r} lists first {paths[0] if paths else 'nothing'}; the first five: {paths[:5]}")
    assert searcher.problems() == []
