"""The one report of a run: what it says, in which order, and in which colours. The renderers (`text`, `terminal`,
`html`) draw a `Report` and decide nothing of their own, so the three cannot drift apart; the timeline picture takes
its colours from here too.

The order is the one a reader wants: the verdict in one line, the sentence that explains it, the contracts the run
broke (a run that finished can still be wrong: with `--strict` they are why it failed; one entry per kind and call
site, with a count, however many times a loop broke it), then the evidence: the table of ranks (outcome, the call
each was inside, its call site) and every rank's output with its rank in front, the last `max_log_lines` of each.

Reads a result's fields without importing `sandbox.result` (verdicts and outcomes are string enums, so the plain
strings below are their keys): the result imports the renderers when it is asked to show itself, and a circle of
imports would make the data depend on its drawing.
"""
from __future__ import annotations

from dataclasses import dataclass

from sandbox.words import plural
from sandbox.words import ranks as ranks_words

MAX_LOG_LINES = 200  # per rank: a run that printed a lot shows its end, which is where it stopped

# One palette for every renderer: mid-tone colours that read on a light and on a dark background alike. A terminal
# gets them through rich, which turns each into the nearest colour the terminal has (and drops them for NO_COLOR).
GREEN, RED, AMBER, GREY = "#2da44e", "#d1242f", "#c48a00", "#8c959f"
VERDICT_COLOUR = {"ok": GREEN, "error": RED, "crash": RED, "hang": AMBER, "timeout": AMBER, "interrupted": AMBER}
OUTCOME_COLOUR = {"ok": GREEN, "error": RED, "crashed": RED, "hung": AMBER, "stopped": GREY}
# one stable colour per rank, for its number in the table and in front of each line it printed
RANK_COLOURS = ["#1b9cc4", "#b04fc7", "#3a9e48", "#4f6fd0", "#b8860b", "#d0454f", "#17a2a2", "#c34fa0"]

COLUMNS = ("rank", "outcome", "pending call", "site")


def rank_colour(rank: int) -> str:
    return RANK_COLOURS[rank % len(RANK_COLOURS)]


def verdict_colour(verdict: str) -> str | None:
    return VERDICT_COLOUR.get(verdict)


def outcome_colour(outcome: str) -> str | None:
    return OUTCOME_COLOUR.get(outcome)


@dataclass(frozen=True, kw_only=True)
class Row:
    """One rank's line of the table."""
    rank: int
    outcome: str
    pending: str  # the call it was inside, short ('all_reduce #3 on [0, 1]'); '-' for a failed rank outside one
    site: str     # where: the pending call's site, else where its error was raised
    node: str = ""  # its node's hostname, shown beside the rank when the run spanned several nodes

    @property
    def label(self) -> str:
        """The rank cell: '2', or '2 (node1)' across nodes."""
        return f"{self.rank} ({self.node})" if self.node else str(self.rank)

    def cells(self) -> tuple[str, str, str, str]:
        return self.label, self.outcome, self.pending, self.site


@dataclass(frozen=True, kw_only=True)
class Broken:
    """A contract the run broke: a title, its sentence, and the rule. One Broken stands for every warning of its
    kind at its call site (`count` of them, on `ranks`): 24 unwaited isends of one loop are one line, not 24."""
    kind: str
    summary: str
    rule: str
    count: int = 1
    site: str = ""
    ranks: tuple[int, ...] = ()

    @property
    def title(self) -> str:
        if self.count == 1:
            return f"Warning [{self.kind}]:"
        return f"Warning [{self.kind}]" + (f" at {self.site}" if self.site else "") + f" (x{self.count}):"

    @property
    def text(self) -> str:
        """The sentence, and for a group how many more there are like it."""
        if self.count == 1:
            return self.summary
        on = f", on {ranks_words(self.ranks)}" if self.ranks else ""
        return f"{self.summary.rstrip('.')} ({self.count - 1} more like it{on})."

    @property
    def rule_line(self) -> str:
        return f"Rule: {self.rule}"


@dataclass(frozen=True, kw_only=True)
class Log:
    """What one rank printed: its last lines, and how many earlier ones were cut."""
    rank: int
    lines: tuple[str, ...]
    cut: int = 0

    @property
    def prefix(self) -> str:
        return f"[rank {self.rank}] "

    @property
    def cut_line(self) -> str | None:
        return f"... {plural(self.cut, 'earlier line')}" if self.cut else None


@dataclass(frozen=True, kw_only=True)
class Report:
    verdict: str
    ok: bool  # the command succeeds: the run's verdict is OK, and no --strict fails it
    headline: str
    diagnosis: str
    broken: tuple[Broken, ...]
    rows: tuple[Row, ...]
    logs: tuple[Log, ...]  # empty when the logs are not wanted (or no rank printed anything)
    strict_failed: bool = False  # the run finished, but broke a contract, and strict makes that a failure

    @property
    def colour(self) -> str | None:
        """The headline's colour: the verdict's, red where strict fails a run that finished."""
        return RED if self.strict_failed else verdict_colour(self.verdict)


def strict_fails(res, strict: bool) -> bool:
    """Does strict (`--strict`, `strict=True`, `--sandbox-strict`) fail this run: it finished, but broke a contract?"""
    return bool(strict) and res.verdict == "ok" and bool(getattr(res, "warnings", ()))


def headline(res, strict: bool = False) -> str:
    """'HANG [p2p_cycle]: 2 ranks in 1.31 s'. A run that finished but broke a contract, under strict, fails: its
    headline never says OK ('FAILED (strict: 1 contract warning): 2 ranks in 3.04 s')."""
    if not strict_fails(res, strict):
        return res.headline()
    ranks_in = res.headline().partition(": ")[2]
    return f"FAILED (strict: {plural(len(res.warnings), 'contract warning')}): {ranks_in}"


def pending_words(r) -> str:
    """The call a rank was inside, short: 'all_reduce #3 on [0, 1]', 'send peer 1'; '-' for a rank that did not
    finish well outside any call, '' for one that did."""
    p = r.pending
    if not p:
        return "" if r.outcome == "ok" else "-"
    text = f"{p['op']}" + (f" #{p['seq']}" if p.get("seq") else "")
    if p.get("peer") is not None:
        text += f" peer {p['peer']}"
    elif p.get("group"):
        g = p["group"]
        text += f" on {g if len(g) <= 8 else f'[{g[0]}..{g[-1]}] ({len(g)} ranks)'}"
    return text


def site(r) -> str:
    """Where a rank was: its pending call's site, else where its error was raised."""
    if r.pending:
        return r.pending.get("site") or ""
    if r.error and r.error.get("site"):
        return r.error["site"]
    return ""


def log_of(rank: int, output: str, max_log_lines: int = MAX_LOG_LINES) -> Log:
    lines = output.splitlines()
    cut = max(len(lines) - max_log_lines, 0)
    return Log(rank=rank, lines=tuple(lines[cut:]), cut=cut)


def warning_site(w) -> str:
    """Where a warning was broken: its call sites (one, usually), as one string."""
    return ", ".join(sorted(set((w.sites or {}).values())))


def warning_groups(warnings) -> list[tuple[object, int, tuple[int, ...]]]:
    """The warnings of one kind at one call site as one: (the first of them, how many, their ranks), in the order
    of each group's first warning. `res.warnings` itself stays complete; this is how it is shown."""
    groups: dict[tuple, list] = {}
    for w in warnings:
        groups.setdefault((w.kind, warning_site(w)), []).append(w)
    return [(ws[0], len(ws), tuple(sorted({r for w in ws for r in w.ranks}))) for ws in groups.values()]


def broken_of(warnings) -> tuple[Broken, ...]:
    return tuple(Broken(kind=w.kind, summary=w.summary, rule=w.rule, count=n, site=warning_site(w), ranks=rs)
                 for w, n, rs in warning_groups(warnings))


def build(res, logs: bool = True, max_log_lines: int = MAX_LOG_LINES, strict: bool = False) -> Report:
    """The report of a RunResult (or anything with its fields); `strict`: a contract warning fails the run."""
    several = len({r.host for r in res.ranks if r.host}) > 1  # one host: the table stays as it always was
    rows = tuple(Row(rank=r.rank, outcome=str(r.outcome), pending=pending_words(r), site=site(r),
                     node=r.host if several and r.host else "") for r in res.ranks)
    broken = broken_of(getattr(res, "warnings", ()))
    shown = tuple(log_of(r.rank, r.output, max_log_lines) for r in res.ranks if r.output) if logs else ()
    failed = strict_fails(res, strict)
    return Report(verdict=str(res.verdict), ok=res.verdict == "ok" and not failed, headline=headline(res, strict),
                  diagnosis=res.diagnosis.summary, broken=broken, rows=rows, logs=tuple(g for g in shown if g.lines),
                  strict_failed=failed)
