"""The scoreboard as text: one row per tool (recall, precision, F1, helpfulness, noise, median seconds to a
verdict), then one row per class with each tool's found/faulty, helpful and noisy counts, so a reader sees where
each tool's score comes from. Plain text, fixed-width: it goes into a terminal, a commit message, an issue."""
from __future__ import annotations


def _num(v, places: int = 2) -> str:
    return "-" if v is None else f"{v:.{places}f}"


def render(doc: dict) -> str:
    """The table of a scoreboard JSON document (section 5 of the API notes)."""
    tools = list(doc["scores"])
    head = f"{'tool':<10}{'recall':>8}{'precision':>11}{'F1':>7}{'helpful':>9}{'noise':>7}{'median s':>10}" \
           f"{'tp':>5}{'wrong':>7}{'fn':>5}{'noisy':>7}"
    out = [f"{len(doc['corpus'])} cases, {doc['backend']}, torch {doc['torch']}, {doc['machine']}, "
           f"limit {doc['limit_s']:g} s", "", head, "-" * len(head)]
    for t in tools:
        s = doc["scores"][t]
        out.append(f"{t:<10}{_num(s['recall']):>8}{_num(s['precision']):>11}{_num(s['f1']):>7}"
                   f"{_num(s['helpfulness']):>9}{_num(s['noise']):>7}{_num(s['median_s'], 1):>10}"
                   f"{s['tp']:>5}{s['wrong']:>7}{s['fn']:>5}{s['noisy']:>7}")
    out += ["", "per class: found/faulty, helpful (h), noisy twins (n)", ""]
    width = max([len(c) for c in doc["per_class"].get(tools[0], {})] + [5]) + 2 if tools else 7
    out.append(f"{'class':<{width}}" + "".join(f"{t:>16}" for t in tools))
    out.append("-" * (width + 16 * len(tools)))
    for c in (doc["per_class"][tools[0]] if tools else {}):
        cells = []
        for t in tools:
            m = doc["per_class"][t][c]
            cells.append(f"{m['tp']}/{m['faulty']} {m['helpful']}h {m['noisy']}n")
        out.append(f"{c:<{width}}" + "".join(f"{x:>16}" for x in cells))
    return "\n".join(out)
