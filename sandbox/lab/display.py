"""Showing what a lab found: in Jupyter as HTML (a result, a check, its timeline picture), elsewhere as text."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile

from sandbox.result import RunResult


def timeline_png(res: RunResult) -> bytes:
    """The timeline picture of a run as PNG bytes. Raises ValueError when the run recorded no calls to draw.
    Drawing switches matplotlib to Agg; the backend in use before (a notebook's inline plots) is put back."""
    import matplotlib

    from sandbox import report

    before = matplotlib.get_backend()  # resolves the default (in a kernel: inline) if nothing chose one yet
    d = tempfile.mkdtemp(prefix="sandbox-timeline-")
    try:
        path = report.timeline(res, os.path.join(d, "timeline.png"))
        with open(path, "rb") as f:
            return f.read()
    finally:
        shutil.rmtree(d, ignore_errors=True)
        if before.lower() != "agg":
            matplotlib.use(before)


def in_jupyter() -> bool:
    """Is there a running IPython kernel (or shell) to display rich output in?"""
    try:
        from IPython import get_ipython
    except ImportError:  # no IPython at all: a script or a test
        return False
    return get_ipython() is not None


def show_html(html: str, text: str) -> None:
    """One piece of output: HTML in Jupyter, the text elsewhere."""
    if not in_jupyter():
        print(text)
        return
    from IPython.display import HTML, display
    display(HTML(html))


def show_result(res: RunResult | None, timeline: bool = False, shown=None) -> None:
    """Display `shown` (default: the result) in Jupyter as HTML, or print it as text elsewhere; with `timeline`,
    the run's timeline picture under it."""
    shown = res if shown is None else shown
    if not in_jupyter():
        print(shown.text(logs=True) if isinstance(shown, RunResult) else shown)
        return
    from IPython.display import Image, display
    display(shown)
    if timeline and res is not None and getattr(shown, "verdict", None) != "todo":
        try:
            display(Image(data=timeline_png(res), format="png"))
        except Exception as e:  # noqa: BLE001  a picture that cannot be drawn is not the run's failure
            print(f"no timeline: {e}", file=sys.stderr)


class Solution:
    """A reference solution, hidden until asked for: in a notebook (and on the site) a closed <details> block the
    learner opens, as the exercises' answers are; as text, one line saying how to read it (`.source`)."""

    def __init__(self, *objs):
        import inspect

        self.source = "\n\n".join(inspect.getsource(o).rstrip("\n") for o in objs) + "\n"  # its FIX comments too
        self.names = [getattr(o, "__qualname__", repr(o)) for o in objs]

    def _repr_html_(self) -> str:
        from html import escape  # plain <pre>: a highlighter's own <style> would restyle the site's code blocks

        return (f"<details><summary>The reference solution ({escape(', '.join(self.names))}): open it once you have"
                f" tried</summary><pre><code class=\"language-python\">{escape(self.source)}</code></pre></details>")

    def __repr__(self) -> str:
        return f"The reference solution ({', '.join(self.names)}), closed: print its .source to read it."


def solution(*objs) -> Solution:
    """The source of `objs` (functions, classes), FIX comments and all, as a reference solution that stays closed
    until the learner opens it."""
    return Solution(*objs)
