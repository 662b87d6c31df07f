"""The scoring rules, the way MPI correctness tools are scored (the MPI Bugs Initiative: recall, precision, F1;
MPI-BugBench: helpfulness and noise), as pure functions of the labels and the runs, so a test recomputes them.

A faulty program's run is "tp" when the tool reported and named the label's cause, "wrong" when it reported
something else, "fn" when it reported nothing (before the limit). A correct twin's run is "noise" when the tool
reported anything, else "quiet". A tp is "helpful" when the ranks it singles out hold every culprit but are not
simply every rank (unless every rank is a culprit) and the lines it names hold the cause's line.

recall = tp / faulty; precision = tp / (tp + wrong + noise), None when the tool never reported (0/0 is not a
number); F1 = their harmonic mean, 0 when there is no tp; helpfulness = helpful / faulty; noise = noisy twins /
twins; median_s over the faulty runs it reported. Ratios are rounded to 3 places, seconds to 2.
"""
from __future__ import annotations

import statistics

FIELDS = ("recall", "precision", "f1", "helpfulness", "noise", "median_s",
          "faulty", "fixed", "tp", "wrong", "fn", "noisy", "helpful")


def verdict(case, variant: str, report) -> tuple[str, bool]:
    """(verdict, helpful) of one run of `case` (a corpus.Case) given the tool's report (a parsers.Report)."""
    if variant == "fixed":
        return ("noise" if report.reported else "quiet"), False
    if not report.reported:
        return "fn", False
    if case.names not in report.names:
        return "wrong", False
    ranks, culprits, everyone = set(report.ranks), set(case.culprits), set(range(case.world))
    helpful = (culprits <= ranks and (ranks != everyone or culprits == everyone) and case.line in report.lines)
    return "tp", helpful


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 3) if b else None


def metrics(runs: list[dict]) -> dict:
    """The scores of one tool over `runs` (the JSON's run records: variant, verdict, helpful, reported, seconds)."""
    faulty = [r for r in runs if r["variant"] == "faulty"]
    fixed = [r for r in runs if r["variant"] == "fixed"]
    n = {v: sum(r["verdict"] == v for r in runs) for v in ("tp", "wrong", "fn", "noise")}
    helpful = sum(bool(r["helpful"]) for r in faulty)
    recall = _ratio(n["tp"], len(faulty))
    precision = _ratio(n["tp"], n["tp"] + n["wrong"] + n["noise"])
    f1 = (round(2 * precision * recall / (precision + recall), 3) if n["tp"] else 0.0) if recall is not None else None
    times = [r["seconds"] for r in faulty if r["reported"] and r["seconds"] is not None]
    return {"recall": recall, "precision": precision, "f1": f1, "helpfulness": _ratio(helpful, len(faulty)),
            "noise": _ratio(n["noise"], len(fixed)), "median_s": round(statistics.median(times), 2) if times else None,
            "faulty": len(faulty), "fixed": len(fixed), "tp": n["tp"], "wrong": n["wrong"], "fn": n["fn"],
            "noisy": n["noise"], "helpful": helpful}


def scores(runs: list[dict], tools: list[str]) -> dict:
    return {t: metrics([r for r in runs if r["tool"] == t]) for t in tools}


def per_class(runs: list[dict], tools: list[str], classes: dict[str, str]) -> dict:
    """{tool: {class: metrics}}, `classes` giving each case's class."""
    out = {}
    for t in tools:
        mine = [r for r in runs if r["tool"] == t]
        out[t] = {c: metrics([r for r in mine if classes[r["case"]] == c]) for c in sorted(set(classes.values()))}
    return out
