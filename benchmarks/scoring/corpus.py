"""The corpus: each case is a faulty program `<case>.py` and its correct twin `<case>.fixed.py`, both labelled by a
header of `# key: value` lines (the format is fixed in the issue's API notes: case, class, names, world, culprits,
cause, nccl for the faulty file; case, fixed, world, nccl for the twin).

Why it checks so much: the label is the answer key. A culprit outside the world, a cause line that does not hold
the call, or a twin that runs with another world size would score every tool against a wrong answer, silently.
So `load` returns the cases that are well formed and one sentence per problem for the rest; the scoreboard refuses
to score a case with a problem, and a test runs the same checks over the whole folder.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(HERE, "corpus")
# the set written after the rules: programs by authors who had not read the diagnosis, re-authored from real bug
# reports, each labelled from plain torchrun's runs (benchmarks/corpus_after/README.md)
CORPUS_AFTER = os.path.join(HERE, "corpus_after")
SETS = {"corpus": CORPUS, "corpus_after": CORPUS_AFTER}

# the cause vocabulary: what a label names and what every parser may emit
CAUSES = ("mismatch", "missing_ranks", "p2p_cycle", "p2p_unmatched", "unwaited", "groups", "init", "object_device",
          "uneven_steps", "unused_parameters", "model_differs", "timeout", "not_destroyed")
# each family (class) and the prefix its case names start with
CLASSES = {"mismatch/op": "mismatch_", "mismatch/shape": "mismatch_", "mismatch/dtype": "mismatch_",
           "mismatch/root": "mismatch_", "mismatch/reduce_op": "mismatch_", "missing_ranks": "missing_",
           "groups": "groups_", "init": "init_", "timeout": "timeout_",
           "p2p/cycle": "p2p_", "p2p/unmatched": "p2p_", "p2p/unwaited": "p2p_", "objects": "objects_",
           "all_to_all": "a2a_", "finishes": "finishes_",
           "ddp/uneven": "ddp_", "ddp/unused": "ddp_", "ddp/model": "ddp_", "fsdp": "fsdp_"}
FAULTY_KEYS = ("case", "class", "names", "world", "culprits", "cause", "nccl")
TWIN_KEYS = ("case", "fixed", "world", "nccl")
WORLDS = (2, 3, 4)
_HEADER = re.compile(r"# ([a-z]+): (.*\S)\s*$")
_NAME = re.compile(r"[a-z][a-z0-9_]*$")
_CAUSE = re.compile(r"([A-Za-z_][\w.]*), line (\d+)$")


@dataclass(frozen=True, kw_only=True)
class Case:
    name: str
    cls: str                  # the family, for the per-class tables
    names: str                # the one cause a correct report names
    world: int
    culprits: tuple           # ranks whose code is wrong or differs
    call: str                 # the call that is the cause...
    line: int                 # ...and the 1-based line of the faulty file where the culprit makes it
    nccl: bool                # the same file shows its bug on NCCL, one GPU per rank
    fix: str                  # the twin's `fixed:` line
    path: str                 # the faulty file
    fixed_path: str           # its twin

    def file(self, variant: str) -> str:
        return self.path if variant == "faulty" else self.fixed_path

    def to_json(self) -> dict:
        return {"class": self.cls, "names": self.names, "world": self.world, "culprits": list(self.culprits),
                "cause": {"call": self.call, "line": self.line}, "nccl": self.nccl,
                "sha256": sha256(self.path), "fixed_sha256": sha256(self.fixed_path)}


def sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def header(path: str, keys: tuple) -> tuple[dict, list[str]]:
    """The `# key: value` lines that open `path`, checked to be exactly `keys` in that order and followed by the
    module docstring: (values, problems)."""
    with open(path, encoding="utf-8") as f:
        text = f.read().splitlines()
    where = os.path.basename(path)
    values, problems = {}, []
    for i, key in enumerate(keys):
        m = _HEADER.match(text[i]) if i < len(text) else None
        if not m or m.group(1) != key:
            problems.append(f"{where}: line {i + 1} should be `# {key}: ...`"
                            f" (found {text[i]!r})" if i < len(text) else f"{where}: the header ends before `{key}`")
            return values, problems
        values[key] = m.group(2)
    after = text[len(keys)] if len(text) > len(keys) else ""
    if not after.startswith('"""'):
        problems.append(f"{where}: the header is not followed by the module docstring (line {len(keys) + 1})")
    return values, problems


def _faulty(path: str, twin: str) -> tuple[Case | None, list[str]]:
    h, problems = header(path, FAULTY_KEYS)
    if problems:
        return None, problems
    name, where = os.path.basename(path)[:-3], os.path.basename(path)

    def bad(msg):
        problems.append(f"{where}: {msg}")

    if h["case"] != name:
        bad(f"`case: {h['case']}` should be the file's name, {name}")
    if not _NAME.match(name):
        bad("a case name is lowercase letters, digits and underscores")
    if h["class"] not in CLASSES:
        bad(f"unknown class {h['class']!r} (known: {', '.join(CLASSES)})")
    elif not name.startswith(CLASSES[h["class"]]):
        bad(f"a case of class {h['class']} is named {CLASSES[h['class']]}...")
    if h["names"] not in CAUSES:
        bad(f"unknown cause {h['names']!r} in `names:` (known: {', '.join(CAUSES)})")
    world = int(h["world"]) if h["world"].isdigit() else None
    if world not in WORLDS:
        bad(f"`world: {h['world']}` should be one of {', '.join(map(str, WORLDS))}")
    try:
        culprits = tuple(int(c) for c in h["culprits"].split(","))
    except ValueError:
        culprits = ()
        bad(f"`culprits: {h['culprits']}` should be comma-separated ranks")
    if world and any(not 0 <= c < world for c in culprits):
        bad(f"culprits {list(culprits)} are not all ranks of a world of {world}")
    if len(set(culprits)) != len(culprits):
        bad("a culprit is listed twice")
    m = _CAUSE.match(h["cause"])
    call, line = (m.group(1), int(m.group(2))) if m else ("", 0)
    if not m:
        bad(f"`cause: {h['cause']}` should read `<call>, line <n>`")
    else:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        if not 1 <= line <= len(lines):
            bad(f"the cause's line {line} is not in the file")
        elif call.rsplit(".", 1)[-1] not in lines[line - 1]:
            bad(f"line {line} does not contain the cause's call {call!r}: {lines[line - 1].strip()!r}")
    if h["nccl"] not in ("yes", "no"):
        bad(f"`nccl: {h['nccl']}` should be yes or no")
    if not os.path.exists(twin):
        bad(f"it has no correct twin {os.path.basename(twin)}")
        return None, problems
    t, twin_problems = header(twin, TWIN_KEYS)
    problems += twin_problems
    if not twin_problems:
        if t["case"] != name:
            problems.append(f"{os.path.basename(twin)}: `case: {t['case']}` should be {name}")
        for key in ("world", "nccl"):
            if t[key] != h[key]:
                problems.append(f"{os.path.basename(twin)}: `{key}: {t[key]}` differs from the faulty file's {h[key]}")
    if problems:
        return None, problems
    return Case(name=name, cls=h["class"], names=h["names"], world=world, culprits=culprits, call=call, line=line,
                nccl=h["nccl"] == "yes", fix=t["fixed"], path=path, fixed_path=twin), []


def load(folder: str = CORPUS) -> tuple[dict[str, Case], dict[str, list[str]]]:
    """Every case in `folder`: ({name: Case} of the well-formed ones, {name: [problem, ...]} of the others).
    A `.fixed.py` without its faulty file is a problem of that name too."""
    files = sorted(f for f in os.listdir(folder) if f.endswith(".py") and not f.startswith("_"))
    cases, problems = {}, {}
    for f in files:
        if f.endswith(".fixed.py"):
            if f[:-len(".fixed.py")] + ".py" not in files:
                problems[f[:-len(".fixed.py")]] = [f"{f}: a twin without its faulty file"]
            continue
        case, bad = _faulty(os.path.join(folder, f), os.path.join(folder, f[:-3] + ".fixed.py"))
        if bad:
            problems[f[:-3]] = bad
        else:
            cases[case.name] = case
    return cases, problems
