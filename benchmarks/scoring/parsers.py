"""What each tool printed, turned into one kind of report: did it report a problem, which causes it named (from the
cause vocabulary), which ranks it singled out, which lines of the program it named, the line it said it in, and a
note of anything a reader should know (the sandbox's own kinds, a tool that failed, no dumps).

The rules are literal and listed here, so the page can show exactly what each parser looks for: a tool gets a
cause only where its own words say it (the tables below), never because the scoreboard knows the answer. Lines are
every `File ".../<program>", line N` and `<program>:N` in the output, whatever the tool meant by them. Anything
the tools print that is not in these tables gives no cause: a report without a name scores "wrong".
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

# the sandbox's kinds (API notes, section 2): its diagnosis of a failed run, and its contract warnings
SANDBOX_DIAGNOSES = {"collective_mismatch": "mismatch", "missing_ranks": "missing_ranks", "p2p_cycle": "p2p_cycle",
                     "wait_cycle": "p2p_cycle",  # a cycle of blocking calls across groups: the corpus labels it so
                     "p2p_unmatched": "p2p_unmatched",
                     "group_mismatch": "groups", "init_mismatch": "init", "uneven_steps": "uneven_steps",
                     "unused_parameters": "unused_parameters", "model_differs": "model_differs",
                     "straggler": "timeout"}
SANDBOX_WARNINGS = {"collective_differs": "mismatch", "call_count": "missing_ranks", "send_cycle": "p2p_cycle",
                    "p2p_unmatched": "p2p_unmatched", "async_unwaited": "unwaited", "group_mismatch": "groups",
                    "object_device": "object_device", "not_destroyed": "not_destroyed",
                    "group_member": "groups", "group_rank": "groups", "any_source": "p2p_unmatched",
                    "buffer_written": "unwaited", "ddp_order": "model_differs",
                    "data_order": "mismatch"}

# torchrun (plain or DETAIL): a line holding one of these names that cause
TORCHRUN_MESSAGES = [
    ("mismatch", r"Is there a distributed collective mismatch"),   # gloo's size check (pair.cc), any debug level
    ("mismatch", r"Detected mismatch between collectives"),        # DETAIL's fingerprint check before each collective
    ("missing_ranks", r"failed to pass monitoredBarrier"),         # monitored_barrier (gloo only)
    ("unused_parameters", r"Expected to have finished reduction in the prior iteration"),  # DDP's reducer
    ("unused_parameters", r"did not receive grad"),                # the same error's list of parameters
    ("model_differs", r"DDP expects same model across all ranks"),  # DDP's constructor check
    ("timeout", r"[Tt]imed out"),                                  # gloo's op timeout, the store's, NCCL's watchdog
    ("timeout", r"Watchdog caught collective operation timeout"),  # NCCL's watchdog
    ("not_destroyed", r"destroy_process_group\(\) was not called"),  # ProcessGroupNCCL's warning at exit
]
# ...and the ranks a message singles out
TORCHRUN_RANKS = [r"but Rank (\d+) is running",                   # DETAIL: the other rank of a mismatch
                  r"Ranks? ([\d, ]+) failed to pass monitoredBarrier",
                  r"DDP expects same model across all ranks, but Rank (\d+)",
                  r"did not receive grad for rank (\d+)"]
# torchrun's "Root Cause (first observed failure):" block names the rank that failed first
ROOT_CAUSE = "Root Cause (first observed failure)"
# a rank's exception (the last line of its traceback, `[rank1]: RuntimeError: ...`) or a C++ abort is a report too
ERROR_LINE = re.compile(r"^(\[rank\d+\]:\s*)?([\w.]*(Error|Exception)\b(:|$)|terminate called after throwing)")

# torchfrtrace (torch/distributed/flight_recorder/components/utils.py and types.py): its findings
FRTRACE_MESSAGES = [
    ("missing_ranks", r"Not all ranks joining collective, sequence number"),  # then "missing ranks: {1}"
    (None, r"Collective sequence number: \d+ has errors"),   # the kind is in "error msg: Culprit rank ..." (below)
    ("mismatch", r"Input/output mismatch in the collective sequence number"),  # all_to_all sizes
    (None, r"We cannot decide what's wrong with this collective entry"),  # it counts it as a mismatch: a report
    ("p2p_unmatched", r"^MISMATCH\s*$"),                           # batched send/recv that do not pair
]
# "error msg: Culprit rank 1; Error type: COLLECTIVE_TYPE_MISMATCH, ..." : these error types are a mismatch;
# COLLECTIVE_STATE_MISMATCH (one rank completed, another did not) names no cause of ours
FRTRACE_MISMATCH_TYPES = {"COLLECTIVE_TYPE_MISMATCH", "SIZE_OR_SYNTAX_MISMATCH", "COLLECTIVE_DTYPE_MISMATCH"}


@dataclass(frozen=True, kw_only=True)
class Report:
    reported: bool
    names: tuple = ()    # causes from the vocabulary, sorted
    ranks: tuple = ()    # ranks it singles out, sorted
    lines: tuple = ()    # lines of the program file it names, sorted
    said: str = ""       # its first relevant line, verbatim
    note: str = ""

    def to_json(self) -> dict:
        return {"reported": self.reported, "names": list(self.names), "ranks": list(self.ranks),
                "lines": list(self.lines), "said": self.said, "note": self.note}


def program_lines(text: str, program: str) -> tuple:
    """Every line number the text gives for the program file (by its base name): `File ".../x.py", line N` and
    `x.py:N` (not `other_x.py:N`)."""
    base = re.escape(program.rsplit("/", 1)[-1])
    found = re.findall(rf'File "(?:[^"]*/)?{base}", line (\d+)', text)
    found += re.findall(rf"(?<![\w.-]){base}:(\d+)", text)
    return tuple(sorted({int(n) for n in found}))


def _ranks(text: str) -> set[int]:
    return {int(r) for r in re.findall(r"\d+", text)}


def sandbox(stdout: str, *, program: str, ended: bool = False) -> Report:
    """`python -m sandbox.run --json`: its JSON. `ended`: it was ended at the limit (what it printed then is not a
    verdict it reached)."""
    if ended:
        return Report(reported=False, note="ended at the limit before its verdict")
    try:
        res = json.loads(stdout.strip().splitlines()[-1])
        verdict, diag, warnings = res["verdict"], res["diagnosis"], res.get("warnings") or []
    except (IndexError, ValueError, KeyError, TypeError) as e:  # no JSON at all: the sandbox itself broke; say so
        return Report(reported=False, note=f"no JSON from the sandbox ({type(e).__name__})")
    kinds = [w["kind"] for w in warnings]
    contract = (diag.get("details") or {}).get("contract")
    names = {SANDBOX_DIAGNOSES.get(diag.get("kind"))} if verdict != "ok" else set()
    names |= {SANDBOX_WARNINGS.get(k) for k in kinds + ([contract] if contract else [])}
    texts = [diag.get("summary") or "", diag.get("site") or ""] if verdict != "ok" else []
    for w in warnings:
        texts += [w.get("summary") or ""] + list((w.get("sites") or {}).values())
    if verdict != "ok":
        ranks, said = diag.get("culprit_ranks") or [], diag.get("summary") or ""
    else:
        # a warning's culprit_ranks: the ranks whose call differs (its `ranks` are every rank the breach involves)
        ranks = sorted({r for w in warnings for r in (w.get("culprit_ranks") or w.get("ranks") or [])})
        said = warnings[0].get("summary", "") if warnings else ""
    note = f"{verdict}: {diag.get('kind')}" + (f"; warnings: {', '.join(kinds)}" if kinds else "")
    return Report(reported=verdict != "ok" or bool(warnings), names=tuple(sorted(names - {None})),
                  ranks=tuple(sorted(set(ranks))), lines=program_lines("\n".join(texts), program), said=said,
                  note=note)


def torchrun(text: str, *, program: str, exit_code: int | None) -> Report:
    """torchrun's stdout and stderr (as far as they came before the limit); `exit_code` None: ended at the limit."""
    lines = text.splitlines()
    known = [(i, name, pat) for i, line in enumerate(lines) for name, pat in TORCHRUN_MESSAGES if re.search(pat, line)]
    errors = [i for i, line in enumerate(lines) if ERROR_LINE.search(line)]
    ranks = {r for pat in TORCHRUN_RANKS for m in re.finditer(pat, text) for r in _ranks(m.group(1))}
    root = next((i for i, line in enumerate(lines) if ROOT_CAUSE in line), None)
    if root is not None:
        m = next((re.match(r"\s*rank\s*:\s*(\d+)", line) for line in lines[root + 1:]
                  if re.match(r"\s*rank\s*:", line)), None)
        if m:
            ranks.add(int(m.group(1)))
    failed = exit_code not in (0, None)
    reported = failed or bool(known) or bool(errors)
    # what it said first, most telling first: a known message, a rank's exception, torchrun's line on the
    # failed rank ("failed (exitcode: -11) local_rank: 0"), torchrun's own exception
    said = next((lines[i] for group in ([i for i, _, _ in known], [i for i in errors if lines[i].startswith("[rank")],
                                        [i for i, line in enumerate(lines) if "(exitcode: " in line], errors)
                 for i in group[:1]), "") if reported else ""
    matched = sorted({pat for _, _, pat in known})
    note = ("ended at the limit" if exit_code is None else f"exit {exit_code}") + \
        (f"; matched: {' | '.join(matched)}" if matched else "")
    if not reported:
        return Report(reported=False, note=note)
    return Report(reported=True, names=tuple(sorted({n for _, n, _ in known})), ranks=tuple(sorted(ranks)),
                  lines=program_lines(text, program), said=said.strip(), note=note)


def _last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def flight(runs: list, *, program: str, dumps: list) -> Report:
    """The Flight Recorder: the dump files the job left and torchfrtrace's runs on them, each (arguments added to
    `torchfrtrace DIR --prefix rank_`, its output, its exit code or None at its limit); the last run is the verdict."""
    if not dumps:
        return Report(reported=False, note="no dumps written")
    parts = [f"dumps: {', '.join(dumps)}"]
    for extra, text, code in runs:
        how = f"torchfrtrace{' ' + ' '.join(extra) if extra else ''}"
        parts.append(f"{how}: " + ("ended at its limit" if code is None else
                                   f"exit {code}" + (f", {_last_line(text)}" if code != 0 else "")))
    note = "; ".join(parts)
    if not runs:
        return Report(reported=False, note=note)
    _, text, code = runs[-1]
    if code != 0:
        return Report(reported=False, note=note)
    lines = text.splitlines()
    found = [(i, name) for i, line in enumerate(lines) for name, pat in FRTRACE_MESSAGES if re.search(pat, line)]
    names = {name for _, name in found if name}
    ranks = set()
    for line in lines:
        if m := re.match(r"\s*missing ranks: \{([\d, ]*)\}", line):
            ranks |= _ranks(m.group(1))
        for r, kind in re.findall(r"Culprit rank (\d+); Error type: (\w+)", line):
            ranks.add(int(r))
            if kind in FRTRACE_MISMATCH_TYPES:
                names.add("mismatch")
    return Report(reported=bool(found), names=tuple(sorted(names)), ranks=tuple(sorted(ranks)) if found else (),
                  lines=program_lines(text, program) if found else (),
                  said=lines[found[0][0]].strip() if found else "", note=note)


def of_run(got, program: str) -> Report:
    """The report of one tools.ToolRun (live, or loaded from a --keep folder) of `program`."""
    if got.tool == "sandbox":
        return sandbox(got.main.text("out"), program=program, ended=got.main.exit_code is None)
    if got.tool == "flight":
        runs = [(c.cmd[c.cmd.index("--prefix") + 2:], c.text(), c.exit_code) for c in got.frtrace]
        return flight(runs, program=program, dumps=got.dumps)
    return torchrun(got.main.text(), program=program, exit_code=got.main.exit_code)
