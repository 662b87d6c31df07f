"""A run held against what a variant of a bug must show (its `Expect`): the parts the run does not show.

One function, `unmet_expectations`, serves every reader: `python -m sandbox.repro` (is the variant as documented?),
the catalogue's tests, the labs (is a learner's fix right?) and tools/refresh_run_output.py. It reads a result's
verdict, diagnosis, ranks' errors and outputs, contract warnings and values, nothing else, so a hand-built result
with those attributes is judged the same way (tests/test_check.py). Torch-free.
"""
from __future__ import annotations

import re

from sandbox.bugs.reference import differences, reference_of


def unmet_expectations(expect, res, *, reference=None, debug: bool = False) -> list[str]:
    """What of `expect` the run `res` does not show, one short reason each; empty when it shows all of it.
    `reference` overrides the one rank 0 computed. With TORCH_DISTRIBUTED_DEBUG on (`debug`), PyTorch's own check
    may turn a documented hang into an error or a crash first: those are accepted too."""
    why = []
    verdicts = (expect.verdict,) if isinstance(expect.verdict, str) else tuple(expect.verdict)
    if debug and "hang" in verdicts:
        verdicts += ("error", "crash")
    if res.verdict not in verdicts:
        why.append(f"verdict {res.verdict}, expected {' or '.join(verdicts)}")
    if expect.kind and res.diagnosis.kind != expect.kind:
        why.append(f"diagnosis {res.diagnosis.kind}, expected {expect.kind}")
    if expect.culprits is not None:
        want = culprit_ranks(expect.culprits, res.world_size)
        if res.diagnosis.culprit_ranks != want:
            why.append(f"culprits {res.diagnosis.culprit_ranks}, expected {want}")
    texts = [(r.error or {}).get("message", "") + "\n" + r.output for r in res.ranks] + [res.diagnosis.summary]
    if expect.error and not any(re.search(expect.error, t) for t in texts):
        why.append(f"no rank's error matches /{expect.error}/")
    if expect.output and not any(re.search(expect.output, r.output) for r in res.ranks):
        why.append(f"no rank's output matches /{expect.output}/")
    if expect.warns and res.verdict == "ok" and expect.warns not in {w.kind for w in res.warnings}:
        why.append(f"it finished without the {expect.warns} warning that names its root cause")
    if expect.matches_reference and res.verdict == "ok":
        ref = reference if reference is not None else reference_of(res)
        if ref is None:
            why.append("no reference to compare with")
        else:
            why += [f"rank {d.rank} {d.sentence()}" for d in differences(res, ref)]
    if expect.differs_from_reference and res.verdict == "ok":
        ref = reference if reference is not None else reference_of(res)
        if ref is None:
            why.append("no reference to compare with")
        elif not differences(res, ref):  # the silent bug did not show: a right answer is not its symptom
            why.append("every rank's value equals the single-process reference, so the wrong answer did not show")
    return why


def culprit_ranks(culprits: list[int] | str, world_size: int) -> list[int]:
    """An Expect's culprits for a run of `world_size` ranks."""
    named = {"others": range(1, world_size), "odd": range(1, world_size, 2), "last": [world_size - 1]}
    return list(named[culprits]) if isinstance(culprits, str) else culprits
