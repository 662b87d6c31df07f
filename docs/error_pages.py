"""The index of error messages (docs/errors/): what each hand-written page says about itself, read from its front
matter, so that adding a page is adding one file.

Each page under docs/errors/ starts with

    ---
    title: <a short name, for the navigation and the index table>
    message: "<the message whole, as torch prints it, with a real run's numbers>"
    group: timeouts | connections | rendezvous | ddp | sizes | gpu
    printer: <who prints it, for the index table>
    typed:                  (optional)
      - "<a short form of the message that a person types, e.g. its exception and its key words>"
    search:
      boost: <n>
    ---
    # <the message, as printed>

The index table (`<!-- gen: errors-index -->` in errors/index.md) lists every page by group from that front
matter; the browser test pastes each `message` into the site's search box and requires its page first
(`error_queries()`), and types each `typed` form, which must list the page first too (`typed_queries()`). The bug
index and the bug pages link a bug's error to the page whose message its regex matches (`page_for`).

How lunr (in Material's search worker) ranks them: a section's score is the sum, over the query words it holds, of
the word's weight in the section's title (x1000) and text (x1), times the page's boost; a page's own top section
then counts up to 5 times, a section under a heading up to 2 times. So a short form (three words of the message)
weighs the same in this page's first heading as in a bug page's heading that quotes it, and the boosts decide: a
message that bug pages (boost 10) quote in their headings needs a boost of its own above 2 for its short form.
"""
from __future__ import annotations

import glob
import html
import os
import re

import yaml

DOCS = os.path.dirname(os.path.abspath(__file__))
ERRORS_DIR = os.path.join(DOCS, "errors")

# The index's groups, in its order: (key in a page's front matter, heading).
GROUPS = [
    ("timeouts", "Timeouts"),
    ("connections", "Lost connections"),
    ("rendezvous", "Rendezvous and the store"),
    ("ddp", "DistributedDataParallel"),
    ("sizes", "Sizes, shapes and mismatched calls"),
    ("gpu", "GPUs and NCCL"),
]


def _front_matter(path: str) -> dict:
    text = open(path, encoding="utf-8").read()
    if not text.startswith("---\n"):
        raise ValueError(f"{path}: an error page starts with front matter (message, group, search boost)")
    meta = yaml.safe_load(text[4:text.index("\n---", 4)]) or {}
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), "")
    missing = [k for k in ("message", "group") if not meta.get(k)]
    if missing or meta["group"] not in dict(GROUPS):
        raise ValueError(f"{path}: front matter needs message and group (one of {[g for g, _ in GROUPS]}); "
                         f"missing {missing or meta.get('group')}")
    typed = meta.get("typed", [])
    if not isinstance(typed, list) or not all(isinstance(q, str) and q.strip() for q in typed):
        raise ValueError(f"{path}: typed is a list of the short forms of the message a person types, not {typed!r}")
    return {**meta, "heading": title}


def error_pages() -> dict[str, dict]:
    """{file name under errors/ ("nccl-watchdog-timeout.md"): its front matter and first heading}, by name."""
    out = {}
    for path in sorted(glob.glob(os.path.join(ERRORS_DIR, "*.md"))):
        name = os.path.basename(path)
        if name != "index.md":
            out[name] = _front_matter(path)
    return out


def error_queries() -> dict[str, str]:
    """{page (errors/<name>/ as the site serves it): the message a person pastes}; that page must be listed first."""
    return {f"errors/{name[:-3]}/": " ".join(p["message"].split()) for name, p in error_pages().items()}


def typed_queries() -> list[tuple[str, str]]:
    """(page, a short form of its message that a person types) for every `typed` form; that page must be listed
    first for it too."""
    return [(f"errors/{name[:-3]}/", " ".join(q.split())) for name, p in error_pages().items()
            for q in p.get("typed", [])]


def page_for(pattern: str | None) -> str | None:
    """The first error page whose message a bug's error regex (`Expect.error`) matches, or None."""
    for name, p in error_pages().items():
        if pattern and re.search(pattern, p["message"]):
            return name
    return None


def index_table() -> str:
    """errors/index.md's table: the messages by group, each linked to its page."""
    pages = error_pages()
    out = []
    for key, head in GROUPS:
        rows = [(n, p) for n, p in pages.items() if p["group"] == key]
        if not rows:
            continue
        out += [f"## {head}", "", "| the message | who printed it |", "| --- | --- |"]
        for name, p in rows:
            shown = html.escape(p.get("title") or p["heading"], quote=False).replace("|", "\\|")
            out.append(f"| [{shown}]({name}) | {p.get('printer', '')} |")
        out.append("")
    return "\n".join(out).rstrip()
