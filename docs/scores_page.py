"""The generated parts of "How well does it diagnose?" (docs/scores.md), from the JSON the scoreboard command wrote.

The corpus takes minutes to run under four tools, so the site never reruns it: `python benchmarks/scoreboard.py
--write benchmarks/scoreboard.json` (and, on a GPU machine, `--gpu --write benchmarks/scoreboard-nccl.json`) writes
the JSON, it is committed, and each `<!-- gen: scores-... -->` marker of the page is filled from it here
(docs/hooks.py calls `markdown(name)`). This module only lays the JSON out, and refuses a file whose scores disagree
with its own runs, so the page can never show figures that its per-case table contradicts.

What each parser looks for is shown from the parser's own tables (benchmarks/scoring/parsers.py), not retold, so the
page cannot drift from what was scored. Before the first run the JSON does not exist: the build must still pass, so
the page says plainly that the scoreboard has not been run and gives the command. Each case's description is its
docstring, read from its file in benchmarks/corpus/; a file that changed since the run is flagged on its row.
"""
from __future__ import annotations

import ast
import datetime
import hashlib
import html
import importlib
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCORES = os.path.join(ROOT, "benchmarks", "scoreboard.json")
NCCL = os.path.join(ROOT, "benchmarks", "scoreboard-nccl.json")
CORPUS = os.path.join(ROOT, "benchmarks", "corpus")
# the set written after the rules, by authors who had not read them (benchmarks/corpus_after/README.md)
AFTER = os.path.join(ROOT, "benchmarks", "scoreboard-after.json")
# the set's first scoring, kept as it was: the sandbox before any rule was changed with this set in view
AFTER_BEFORE = os.path.join(ROOT, "benchmarks", "scoreboard-after-before.json")
CORPUS_AFTER = os.path.join(ROOT, "benchmarks", "corpus_after")
AFTER_COMMAND = ("python benchmarks/scoreboard.py --corpus benchmarks/corpus_after --tools sandbox "
                 "--write benchmarks/scoreboard-after.json")

# The tools in the order of the tables, and how the page names them (the list under "How it is scored" spells out
# each one's command): plain text, short, so a table of nine columns fits the page without scrolling.
TOOLS = {"sandbox": "the sandbox", "torchrun": "plain torchrun", "detail": "torchrun + DETAIL",
         "flight": "torchrun + Flight Recorder"}
# Their names as column headings of the wide tables (per family, per case), where every pixel counts.
COLUMNS = {"sandbox": "sandbox", "torchrun": "torchrun", "detail": "DETAIL", "flight": "Flight Recorder"}
# The families in the order the corpus introduces them (collectives, point-to-point and the rest, frameworks).
CLASSES = ["mismatch/op", "mismatch/shape", "mismatch/dtype", "mismatch/root", "mismatch/reduce_op", "missing_ranks",
           "groups", "init", "timeout", "p2p/cycle", "p2p/unmatched", "p2p/unwaited", "objects", "all_to_all",
           "finishes", "ddp/uneven", "ddp/unused", "ddp/model", "fsdp"]
# What each tool's parser does with its rules, in words; the rules themselves (messages, kinds, causes) are read from
# the scoreboard's own module, benchmarks/scoring/parsers.py, so the page shows what the parser really matches.
PARSERS = {
    "sandbox": "A failed verdict or any contract warning in its JSON is a report. The causes are those of its "
               "diagnosis' kind and its warnings' kinds; the ranks are the diagnosis' culprit ranks (the warnings' "
               "ranks in a run that finished); the lines are those its summary and call sites give for the program.",
    "torchrun": "A non-zero exit, a rank's exception line or one of the messages below is a report. A cause is named "
                "only where a line matches one of these messages, so a crash without one scores \"wrong\". Ranks "
                "come from the messages' own words and from the rank under torchrun's \"{root}\"; lines are every "
                "`File \".../<program>\", line N` and `<program>:N` in the output.",
    "detail": "The same parser and messages as plain torchrun: DETAIL adds what its checks print (\"Detected "
              "mismatch between collectives\", with the ranks).",
    "flight": "No dump written, or `torchfrtrace` failing on the dumps, is no report (the note says which). "
              "Otherwise each finding below is a report; its \"missing ranks: {{...}}\" and \"Culprit rank N\" "
              "single out ranks, and an error type among {types} names `mismatch`.",
}
COMMAND = "python benchmarks/scoreboard.py --write benchmarks/scoreboard.json"
NCCL_COMMAND = "python benchmarks/scoreboard.py --gpu --write benchmarks/scoreboard-nccl.json"
NOT_RUN = ("The scoreboard has not been run yet, so there are no figures here. Run it from the repository root; it "
           "writes `benchmarks/scoreboard.json`, which this page shows once it is committed:")


def load(path: str) -> dict | None:
    """The scoreboard's JSON at path, checked against its own runs; None when the file does not exist yet."""
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    for tool, got in data["scores"].items():
        want = counts([r for r in data["runs"] if r["tool"] == tool])
        wrong = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
        if wrong:  # a page whose table and rows disagree would mislead: fail the build instead
            raise ValueError(f"{path}: the scores of {tool} disagree with its runs ((scores, runs): {wrong}); "
                             f"rerun `{COMMAND}`")
    return data


def counts(runs: list[dict]) -> dict:
    """The counts of one tool's runs by verdict (benchmarks/scoring/score.py): what its `scores` entry holds."""
    faulty = [r for r in runs if r["variant"] == "faulty"]
    fixed = [r for r in runs if r["variant"] == "fixed"]
    return {"faulty": len(faulty), "fixed": len(fixed),
            **{v: sum(r["verdict"] == v for r in faulty) for v in ("tp", "wrong", "fn")},
            "noisy": sum(r["verdict"] == "noise" for r in fixed), "helpful": sum(bool(r["helpful"]) for r in faulty)}


# -------------------------------------------------------------------------------------------------- the wording

def ratio(x) -> str:
    """A score to two decimals; a dash where it is undefined (precision of a tool that never reported)."""
    return "–" if x is None else f"{x:.2f}"


def secs(x) -> str:
    return "–" if x is None else f"{x:.1f} s"


def code(text: str) -> str:
    """text as an inline code span, whatever backticks it holds (a tool's words, verbatim)."""
    ticks = "`" * (max((len(t) for t in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def cell(text: str) -> str:
    """Plain text made safe for a markdown table cell (no HTML, no column break)."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "&#124;")


def made(data: dict) -> str:
    """`made` ("2026-11-27T06:30:00Z") as a person reads a date."""
    try:
        t = datetime.datetime.fromisoformat(data["made"].replace("Z", "+00:00"))
    except ValueError:  # not ISO 8601: show it as the command wrote it rather than guess
        return data["made"]
    return f"{t.day} {t:%B %Y}, {t:%H:%M} UTC"


def tools(data: dict) -> list[str]:
    return [t for t in TOOLS if t in data["scores"]] + sorted(set(data["scores"]) - set(TOOLS))


def ranks(rs: list[int]) -> str:
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))


# ------------------------------------------------------------------------------------------------------ the parts

def main_table(data: dict) -> str:
    """One row per tool: the scores, then the counts they come from."""
    out = ["| tool | recall | precision | F1 | helpfulness | noise | median time to a verdict | named / wrong / "
           "missed | noisy twins |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for t in tools(data):
        s = data["scores"][t]
        out.append(f"| {TOOLS.get(t, t)} | {ratio(s['recall'])} | {ratio(s['precision'])} | {ratio(s['f1'])} | "
                   f"{ratio(s['helpfulness'])} | {ratio(s['noise'])} | {secs(s['median_s'])} | "
                   f"{s['tp']} / {s['wrong']} / {s['fn']} of {s['faulty']} | {s['noisy']} of {s['fixed']} |")
    return "\n".join(out)


def provenance(data: dict) -> str:
    """Where the figures come from: date, torch, Python, machine, backend, limit, and the command to rerun them."""
    return (f"Made on {made(data)} with torch {data['torch']} and Python {data['python']}, on {data['machine']}, "
            f"backend {data['backend']}; every run was stopped at {data['limit_s']} s. {len(data['corpus'])} faulty "
            f"programs and their correct twins. To rerun it, from the repository root:\n\n"
            f"```bash\n{data['command']}\n```")


def rules():
    """The scoreboard's parsers (benchmarks/scoring/parsers.py; it imports no torch): their tables of rules."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    return importlib.import_module("benchmarks.scoring.parsers")


def _messages(table: list) -> list[tuple[str, str]]:
    return [(code(pat), code(c) if c else "(a report; its error type decides)") for c, pat in table]


def _folded(title: str, head: str, rows: list[tuple[str, str]]) -> list[str]:
    """A two-column table folded away under a title (pymdownx.details: plain <details>, no script)."""
    return [f'    ??? info "{title}"', f"        | {head} | cause |", "        | --- | --- |",
            *[f"        | {a} | {b} |" for a, b in rows], ""]


def tool_commands(data: dict | None) -> str:
    """Each tool: the command the scoreboard ran it with (from the JSON, once there is one), what its parser does,
    and the parser's own table of what names which cause."""
    p, out = rules(), []
    folds = {
        "sandbox": _folded("The sandbox's kinds and the causes they name", "the sandbox reports",
                           [(f"diagnosis {code(k)}", code(c)) for k, c in p.SANDBOX_DIAGNOSES.items()]
                           + [(f"warning {code(k)}", code(c)) for k, c in p.SANDBOX_WARNINGS.items()]),
        "torchrun": _folded("The messages the torchrun parser recognises", "a line matching",
                            _messages(p.TORCHRUN_MESSAGES)),
        "flight": _folded("The findings of torchfrtrace the parser recognises", "a line matching",
                          _messages(p.FRTRACE_MESSAGES)),
    }
    words = {t: w.format(root=p.ROOT_CAUSE, types=", ".join(map(code, sorted(p.FRTRACE_MISMATCH_TYPES))))
             for t, w in PARSERS.items()}
    for t in tools(data) if data else TOOLS:
        ran = f"run as {code(data['tools'][t])}. " if data and data["tools"].get(t) else ""
        out += [f"- **{TOOLS.get(t, t)}**: {ran}{words.get(t, '')}", ""] + folds.get(t, [])
    return "\n".join(out).rstrip()


def family_cell(s: dict | None) -> str:
    """named/faulty, with the helpful and the noisy where there are any; a dash where the tool has no such case."""
    if s is None:
        return "–"
    extra = ([f"{s['helpful']} helpful"] if s["tp"] else []) + ([f"{s['noisy']} noisy"] if s["noisy"] else [])
    return f"{s['tp']}/{s['faulty']}" + (f" ({', '.join(extra)})" if extra else "")


def class_table(data: dict) -> str:
    """Families (rows) by tool (columns)."""
    ts, per = tools(data), data["per_class"]
    fams = [c for c in CLASSES if any(c in per.get(t, {}) for t in ts)]
    fams += sorted({c for t in ts for c in per.get(t, {})} - set(fams))
    out = ["| family | " + " | ".join(COLUMNS.get(t, t) for t in ts) + " |", "| --- |" + " ---: |" * len(ts)]
    out += [f"| {c} | " + " | ".join(family_cell(per.get(t, {}).get(c)) for t in ts) + " |" for c in fams]
    return "\n".join(out)


def describe(case: str, label: dict, corpus: str) -> str:
    """The case's docstring, read from its file in the corpus; flagged when the file is gone or changed."""
    path = os.path.join(corpus, case + ".py")
    if not os.path.exists(path):
        return f"(no such file in {os.path.relpath(corpus, ROOT)}/ any more)"
    with open(path, "rb") as f:
        src = f.read()
    try:
        doc = ast.get_docstring(ast.parse(src)) or ""
    except SyntaxError:  # a corpus file need not be valid Python to be a label; the row says what it can
        doc = ""
    changed = hashlib.sha256(src).hexdigest() != label.get("sha256")
    return cell(doc) + (" *(the file has changed since this run)*" if changed else "")


def verdict(run: dict | None, label: dict) -> str:
    """A run in a few words: "named, helpful, 1.3 s", "wrong: timeout", "missed (limit)"; a twin "quiet"/"noise"."""
    if run is None:
        return "–"
    v = run["verdict"]
    if v == "tp":  # if not helpful, say why: the rules of score.py, one by one
        got, culprits, everyone = set(run["ranks"]), set(label["culprits"]), set(range(label["world"]))
        why = [] if run["helpful"] else [w for w, ok in (
            ("not the rank", culprits <= got), ("every rank", got != everyone or culprits == everyone),
            ("no line", label["cause"]["line"] in run["lines"])) if not ok] or ["not helpful"]
        return ", ".join(["named"] + (["helpful"] if run["helpful"] else why) + [secs(run["seconds"])])
    if v in ("wrong", "noise"):
        return f"{v}: {', '.join(run['names']) or 'no cause'}"
    if v == "fn":
        return f"missed ({run['outcome']})"
    return v  # "quiet": a twin the tool said nothing about


def cases(data: dict) -> list[tuple[str, dict]]:
    """The corpus by family, in the order of CLASSES, then by name: the order of every per-case part."""
    order = {c: i for i, c in enumerate(CLASSES)}
    return sorted(data["corpus"].items(), key=lambda kv: (order.get(kv[1]["class"], len(order)), kv[0]))


def case_table(data: dict, corpus: str) -> str:
    """One row per case: what it is, its label, and per tool the verdict on the faulty program and on its twin."""
    ts = tools(data)
    by = {(r["case"], r["variant"], r["tool"]): r for r in data["runs"]}
    out = ["| case | the label | " + " | ".join(COLUMNS.get(t, t) for t in ts) + " |",
           "| --- | --- |" + " --- |" * len(ts)]
    for case, lb in cases(data):
        tool_cells = [f"{verdict(by.get((case, 'faulty', t)), lb)}<br>twin: {verdict(by.get((case, 'fixed', t)), lb)}"
                      for t in ts]
        # the name in bold, not code: a code span in a narrow cell breaks mid-word
        out.append(f"| **{case}**<br>{describe(case, lb, corpus)} | {lb['class']}<br>names {lb['names']}<br>"
                   f"{ranks(lb['culprits'])}: {lb['cause']['call']}, line {lb['cause']['line']} | "
                   + " | ".join(tool_cells) + " |")
    return "\n".join(out)


def said(data: dict) -> str:
    """Per case, folded away: each tool's first relevant line, verbatim, and the scoreboard's note."""
    ts, out = tools(data), []
    by = {(r["case"], r["variant"], r["tool"]): r for r in data["runs"]}
    for case, _ in cases(data):
        out.append(f'??? quote "{case}: what each tool said"')
        for t in ts:
            for variant in ("faulty", "fixed"):
                r = by.get((case, variant, t))
                if r is None:
                    continue
                words = code(r["said"]) if r["said"] else "nothing"
                note = f" ({cell(r['note'])})" if r.get("note") else ""
                out.append(f"    - {TOOLS.get(t, t)}, {variant} ({r['outcome']}, {secs(r['seconds'])}): "
                           f"{words}{note}")
        out.append("")
    return "\n".join(out).rstrip()


def section(data: dict | None, corpus: str, *, what: str, where: str, file: str, command: str, cases: str,
            families: bool = False) -> str:
    """A scored set of its own (the NCCL subset, the set written after the rules): its main table, where and when
    it ran, its families if asked, and its cases folded away; before its first run, the command that scores it."""
    if data is None:
        return (f"{what} has not been scored yet. {where}this writes `{file}`, which this section shows once it is "
                f"committed:\n\n```bash\n{command}\n```")
    table = "\n".join("    " + line for line in case_table(data, corpus).splitlines())
    parts = [main_table(data), provenance(data)] + ([class_table(data)] if families else [])
    return "\n\n".join(parts) + f"\n\n??? note \"Per case {cases.format(n=len(data['corpus']))}\"\n{table}"


def nccl_part(data: dict | None, corpus: str) -> str:
    """The NCCL subset from the GPU machine."""
    return section(data, corpus, what="The NCCL subset", file="benchmarks/scoreboard-nccl.json",
                   where="On a machine with GPUs (one per rank), from the repository root, ", command=NCCL_COMMAND,
                   cases="on NCCL ({n} cases)")


def before_and_now(before: dict, now: dict) -> str:
    """The sandbox on one set at two times: its first scoring (before any rule was changed with the set in view)
    and the latest, one row each."""
    rows = main_table({"scores": {"sandbox": before["scores"]["sandbox"]}}).splitlines()[2:]
    rows += main_table({"scores": {"sandbox": now["scores"]["sandbox"]}}).splitlines()[2:]
    head = main_table({"scores": {}}).replace("| tool |", "| the sandbox |").splitlines()
    code = f" (the sandbox of commit {before['code']})" if before.get("code") else ""
    cells = [f"before{code}, {made(before)}", f"now, {made(now)}"]
    return "\n".join(head + [f"| {c} |" + row.split("|", 2)[2] for c, row in zip(cells, rows)])


def after_part(data: dict | None, corpus: str, before: dict | None = None) -> str:
    """The set written after the rules: the sandbox's scores on it, by family too, and beside its first scoring
    where that is kept (`benchmarks/scoreboard-after-before.json`)."""
    text = section(data, corpus, what="The set written after the rules", where="From the repository root, ",
                   file="benchmarks/scoreboard-after.json", command=AFTER_COMMAND,
                   cases="({n} cases written after the rules)", families=True)
    if data is None or before is None or "sandbox" not in before.get("scores", {}):
        return text
    head, fold, cases = text.partition("\n\n??? note")  # beside the scores, before the cases folded away
    return (f"{head}\n\nThe same set scored by the sandbox as it was before any rule was changed with this set in "
            f"view (`benchmarks/scoreboard-after-before.json`, which names the commit it ran) and now:\n\n"
            f"{before_and_now(before, data)}"
            f"{fold}{cases}")


def markdown(name: str, *, scores: str = SCORES, nccl: str = NCCL, corpus: str = CORPUS, after: str = AFTER,
             corpus_after: str = CORPUS_AFTER, after_before: str = AFTER_BEFORE) -> str:
    """The generated part `name` (`<!-- gen: NAME -->` in docs/scores.md)."""
    parts = {"scores-main": lambda d: main_table(d) + "\n\n" + provenance(d),
             "scores-classes": class_table,
             "scores-cases": lambda d: case_table(d, corpus),
             "scores-said": said}
    if name == "scores-nccl":
        return nccl_part(load(nccl), corpus)
    if name == "scores-after":
        return after_part(load(after), corpus_after, load(after_before))
    if name == "scores-tools":  # the parsers' rules stand before the first run; the commands come with it
        return tool_commands(load(scores))
    if name not in parts:
        raise KeyError(f"unknown generated part {name!r} of docs/scores.md (known: scores-tools, scores-nccl, "
                       f"scores-after, "
                       f"{', '.join(parts)})")
    data = load(scores)
    if data is None:
        return (f"{NOT_RUN}\n\n```bash\n{COMMAND}\n```" if name == "scores-main" else
                "(No figures yet: the scoreboard has not been run, see above.)")
    return parts[name](data)
