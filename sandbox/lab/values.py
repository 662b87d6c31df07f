"""Predicting values (lab 00): the learner says what each rank's call returns before running it, and
`predict_values` runs it on N ranks and shows, rank by rank, what was predicted and what came back."""
from __future__ import annotations

from html import escape

from sandbox.bugs.reference import brief, first_difference
from sandbox.lab.checks import Check, failed, inits_itself
from sandbox.lab.display import in_jupyter, show_result
from sandbox.launcher import Interrupted, UsageError, launch
from sandbox.report import html


def predict_values(fn, predicted, n: int = 4, args: tuple = (), kwargs: dict | None = None, show: bool = True,
                   **launch_options) -> Check:
    """Run `fn(*args, **kwargs)` on `n` ranks and compare what each rank returned with `predicted[rank]` (a list,
    or a dict rank -> value: a rank it leaves out is not graded), as the single-process reference comparison
    does (nested lists, dicts, tensors; float32 tolerances). Shows a table (rank, you predicted, it returned,
    right or wrong) and returns a Check, ok when every predicted rank matches."""
    if isinstance(predicted, dict):
        guesses = dict(predicted)
    elif isinstance(predicted, (list, tuple)):
        guesses = dict(enumerate(predicted))
    else:
        raise ValueError(f"predicted is a list (one value a rank) or a dict rank -> value, not {predicted!r}.")
    outside = sorted(r for r in guesses if not (isinstance(r, int) and 0 <= r < n))
    if outside:
        raise ValueError(f"predicted names rank {outside[0]}, but the run has ranks 0-{n - 1}.")
    launch_options.setdefault("init", not inits_itself(fn))
    rows = []
    try:
        res = launch(fn, world_size=n, args=tuple(args), kwargs=kwargs, **launch_options)
    except UsageError as e:  # the function cannot reach the ranks: an answer, not a crash
        c = Check(False, "error", str(e))
    except Interrupted as e:
        c = failed(e.result)
    else:
        if res.verdict != "ok":
            c = failed(res)
        else:
            rows = [(r, guesses[r], v, first_difference(as_predicted(v, guesses[r]), guesses[r]) is None)
                    for r, v in enumerate(res.values) if r in guesses]
            wrong = [row for row in rows if not row[3]]
            if wrong:
                r, said, got, _ = wrong[0]
                msg = (f"{len(rows) - len(wrong)} of {len(rows)} right. Rank {r} returned {brief(got)}; you"
                       f" predicted {brief(said)}.")
            else:
                msg = f"All {len(rows)} right."
            c = Check(not wrong, "wrong" if wrong else "right", msg, res)
    if show:
        if not rows:
            show_result(c.result, shown=c)
        elif in_jupyter():
            from IPython.display import HTML, display
            display(HTML(html.banner(c.ok, "Right" if c.ok else "Not quite", c.message) + table_html(rows)))
        else:
            print(f"{'Right' if c.ok else 'Not quite'}: {c.message}\n{table_text(rows)}")
    return c


def as_predicted(got, said):
    """What a rank returned, in the form the prediction was written in: a tensor as its list of numbers when a
    list was predicted, a whole float as an int when an int was (6.0 for 6 is not a wrong prediction)."""
    if hasattr(got, "tolist") and not hasattr(said, "tolist"):
        got = got.tolist()
    if isinstance(got, (list, tuple)) and isinstance(said, (list, tuple)) and len(got) == len(said):
        return type(got)(as_predicted(g, s) for g, s in zip(got, said))
    if isinstance(got, dict) and isinstance(said, dict):
        return {k: as_predicted(v, said[k]) if k in said else v for k, v in got.items()}
    if type(got) is float and type(said) is int and got == said:
        return said
    if type(got) is int and type(said) is float:
        return float(got)
    return got


def table_text(rows) -> str:
    lines = [("rank", "you predicted", "it returned", "")] + [
        (str(r), brief(p), brief(v), "right" if ok else "wrong") for r, p, v, ok in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines)


def table_html(rows) -> str:
    head = "".join(f"<th style='text-align: left; padding-right: 1.2em'>{h}</th>"
                   for h in ("rank", "you predicted", "it returned", ""))
    body = "".join(
        f"<tr><td>{r}</td><td><code>{escape(brief(p))}</code></td><td><code>{escape(brief(v))}</code></td>"
        f"<td style='color: {html.GREEN if ok else html.RED}'>{'right' if ok else 'wrong'}</td></tr>"
        for r, p, v, ok in rows)
    return f'<table class="sandbox-predicted"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
