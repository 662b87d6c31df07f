"""Predictions that count: before a broken run the learner says what it will do (`Lab.predict(verdict=...,
kind=..., culprits=...)`), and the run grades it, field by field, with the truth and what it means.

The words a prediction may use are the sandbox's own: the verdicts of a run (`VERDICTS`, plus "wrong": it
finishes with a wrong answer, told from the single-process reference the run computed) and the diagnosis kinds
(`KINDS`, each with one plain sentence; `kinds()` shows them, so a learner can predict without reading code).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

from sandbox import words
from sandbox.bugs.reference import differences, reference_of
from sandbox.result import KIND_GLOSSARY, VERDICT_GLOSSARY, RunResult, Verdict

# what a whole run came to, as a prediction may say it: the verdicts of `sandbox.result` that a broken variant can
# come to, and "wrong", which only a reference can tell
VERDICTS = {"ok": VERDICT_GLOSSARY[Verdict.OK],
            "wrong": "every rank finished, but with a wrong answer: a value differs from the single-process reference",
            **{str(v): VERDICT_GLOSSARY[v] for v in (Verdict.HANG, Verdict.ERROR, Verdict.CRASH, Verdict.TIMEOUT)}}
# the diagnosis kinds the sandbox names, one plain sentence each: `sandbox.result`'s
KINDS = {str(k): s for k, s in KIND_GLOSSARY.items()}
FIELDS = ("verdict", "kind", "culprits")


def kinds() -> None:
    """Show the diagnosis kinds a prediction can name, one sentence each, and the verdicts (`KINDS` and
    `VERDICTS` hold them). Returns nothing, so a cell ending with it shows the table once."""
    from sandbox.lab.display import show_html

    rows = [("verdict", k, s) for k, s in VERDICTS.items()] + [("kind", k, s) for k, s in KINDS.items()]
    text = "\n".join(f"{what:8} {k:20} {s}" for what, k, s in rows)
    cell = "text-align: left; padding: 0.1em 1.2em 0.1em 0; vertical-align: top"
    body = "".join(f'<tr><td style="{cell}">{w}</td><td style="{cell}"><code>{escape(k)}</code></td>'
                   f'<td style="{cell}">{escape(s)}</td></tr>' for w, k, s in rows)
    head = "".join(f'<th style="{cell}">{h}</th>' for h in ("field", "value", "what it means"))
    show_html(f'<table class="sandbox-kinds"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>', text)


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """What the learner expects of the next run; a field left out (None) is not graded."""
    verdict: str | None = None
    kind: str | None = None
    culprits: tuple[int, ...] | None = None

    def _ipython_display_(self) -> None:
        """Shown once, by `Lab.predict` itself: a cell that ends with `b.predict(...)` does not show it again."""

    def __str__(self) -> str:
        said = [f"verdict {self.verdict}" if self.verdict else "", f"kind {self.kind}" if self.kind else "",
                f"culprits {list(self.culprits)}" if self.culprits is not None else ""]
        return "; ".join(s for s in said if s) or "nothing"


def prediction(verdict=None, kind=None, culprits=None) -> Prediction:
    """A checked Prediction; ValueError, in one sentence, for a value the sandbox never reports."""
    if verdict is not None and verdict not in VERDICTS:
        raise ValueError(f"{verdict!r} is not a verdict; a run's verdict is one of {', '.join(VERDICTS)}.")
    if kind is not None and kind not in KINDS:
        raise ValueError(f"{kind!r} is not a diagnosis kind the sandbox names; lab.kinds() lists them"
                         f" ({', '.join(KINDS)}).")
    if culprits is not None:
        if isinstance(culprits, int) and not isinstance(culprits, bool):
            culprits = [culprits]
        if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in culprits):
            raise ValueError(f"culprits are rank numbers (a list of whole numbers), not {culprits!r}.")
        culprits = tuple(sorted(set(culprits)))
    if verdict is None and kind is None and culprits is None:
        raise ValueError("a prediction needs at least one of verdict, kind or culprits.")
    return Prediction(verdict=verdict, kind=kind, culprits=culprits)


@dataclass(frozen=True, kw_only=True)
class Grade:
    """A prediction against a run: `right` (field -> bool, for the fields predicted), `truth` (field -> what the
    run showed) and `lines` (one sentence a field)."""
    prediction: Prediction
    right: dict = field(default_factory=dict)
    truth: dict = field(default_factory=dict)
    lines: tuple[str, ...] = ()

    @property
    def score(self) -> str:
        return f"{sum(self.right.values())} of {len(self.right)}"

    @property
    def ok(self) -> bool:
        return all(self.right.values())

    def __str__(self) -> str:
        return f"Your prediction: {'; '.join(self.lines)}. {self.score} right."

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str:
        from sandbox.report import html
        return html.banner(self.ok, "Your prediction:", f"{'; '.join(self.lines)}. {self.score} right.")


def verdict_of(res: RunResult) -> str:
    """The run's verdict as a prediction says it: "wrong" for a run that finished with a value that differs from
    the reference rank 0 computed beside it (a silent bug's broken variant computes one)."""
    if res.verdict == "ok":
        ref = reference_of(res)
        if ref is not None and differences(res, ref):
            return "wrong"
    return str(res.verdict)


def grade(p: Prediction, res: RunResult) -> Grade:
    """Each predicted field right or not, with the truth and one line of what it means."""
    truth = {"verdict": verdict_of(res), "kind": res.diagnosis.kind,
             "culprits": tuple(sorted(set(res.diagnosis.culprit_ranks)))}
    right, lines = {}, []
    if p.verdict is not None:
        t = truth["verdict"]
        right["verdict"] = p.verdict == t
        lines.append(f"verdict {p.verdict} - right" if right["verdict"] else
                     f"verdict {p.verdict} - not quite: it is {t} ({VERDICTS.get(t, t)})")
    if p.kind is not None:
        t = truth["kind"]
        right["kind"] = p.kind == t
        lines.append(f"kind {p.kind} - right" if right["kind"] else
                     f"kind {p.kind} - not quite: it is {t} ({KINDS.get(t, t)})")
    if p.culprits is not None:
        t = truth["culprits"]
        right["culprits"] = p.culprits == t
        named = words.ranks(t) if t else "no rank"
        lines.append(f"culprits {list(p.culprits)} - right" if right["culprits"] else
                     f"culprits {list(p.culprits)} - not quite: the sandbox names {named}"
                     f" ({'the ranks whose calls or code caused it' if t else 'nobody is to blame for the run'})")
    return Grade(prediction=p, right=right, truth=truth, lines=tuple(lines))
