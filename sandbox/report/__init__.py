"""Drawing a RunResult: one report model (`model`: what is said, in which order and colours), drawn as plain text
(`text`), in a terminal through rich (`terminal`) and as HTML for notebooks and the docs site (`html`); and the
timeline picture (`picture`). The data (`sandbox.result`) does not depend on any of this.

The functions other modules call: `print_result`, `headline`, `timeline`, `spans`.
"""
from sandbox.report.model import MAX_LOG_LINES, headline  # noqa: F401
from sandbox.report.picture import spans, timeline  # noqa: F401
from sandbox.report.terminal import print_result  # noqa: F401
