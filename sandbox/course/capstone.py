"""The capstone lab's script and its check. `capstone_train.py` is a data-parallel training script with two
distributed bugs and no labels; the learner copies it (`copy_script`), finds the bugs with the toolbox, edits the
copy, and `check(path)` says which of the two bugs the copy still has.

Each bug shows alone under its own settings, so the check can name them apart: on 12 samples (4 equal shares) only
the evaluation bug can show, with evaluation off only the uneven-shares bug can, on a tail of one sample (13) and of
two (14: a fix that drops rank 0's extra sample only still hangs there); the script's own settings (13 samples,
evaluation every 2 steps) need both fixed, on 4 ranks and on 3 (a fix that counts on 4 ranks fails there). A run
counts as fixed when it finishes, every rank took part in the averaging (at least one collective per step, as the
Flight Recorder or the tracer saw it: a copy where each rank trains on all the samples alone has the right weights
and no data parallelism), and its final weights match a
single-process reference: training on every step's samples at once, with the tail dropped, padded as
`DistributedSampler` pads it, or kept with zeros from the ranks that have no sample left, as `Join` does (lab 11).
Each is a fix people use; which one a job wants is its own choice.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
from dataclasses import dataclass

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "capstone_train.py")
WORLD = 4
TRIALS = (  # (what the run shows, the script's arguments, the bug it isolates)
    ("evaluation every 2 steps, 12 samples", ["--samples", "12", "--eval-every", "2"], "evaluation"),
    ("no evaluation, 13 samples", ["--samples", "13", "--eval-every", "0"], "uneven shares"),
    ("no evaluation, 14 samples", ["--samples", "14", "--eval-every", "0"], "uneven shares"),  # a longer tail
    ("the script's own settings: evaluation every 2 steps, 13 samples", ["--samples", "13", "--eval-every", "2"],
     None),
    ("the same on 3 ranks (a tail of one sample there too)", ["--samples", "13", "--eval-every", "2"], None, 3),
)  # each on WORLD ranks, unless a fourth item says how many
BUGS = {
    "evaluation": "only rank 0 evaluates, and evaluate() makes an all_reduce the other ranks never make",
    "uneven shares": "13 samples over 4 ranks give rank 0 one step more, and one gradient all_reduce more",
}
_FINAL = re.compile(r"final weights: (\[.*\])")
# The answer, as the two edits that fix the script (kept as edits so the script has one source)
FIXES = (
    ("    mine = list(range(rank, args.samples, world))\n",
     "    usable = args.samples // world * world  # equal shares: every rank makes the same number of steps\n"
     "    mine = list(range(rank, usable, world))\n"),
    ("        if rank == 0 and args.eval_every and step % args.eval_every == 0:\n"
     "            print(f\"step {step}: validation loss {evaluate(model, x, y):.4f}\")\n",
     "        if args.eval_every and step % args.eval_every == 0:\n"
     "            val = evaluate(model, x, y)  # every rank evaluates: evaluate() all_reduces\n"
     "            if rank == 0:\n"
     "                print(f\"step {step}: validation loss {val:.4f}\")\n"),
)


def copy_script(dest: str = "my_train.py") -> str:
    """Copy the capstone's training script to `dest` (not over an existing file) for the learner to edit."""
    if not os.path.exists(dest):
        shutil.copyfile(SCRIPT, dest)
    return dest


def solution(dest: str, fixes=FIXES) -> str:
    """Write the script with `fixes` applied (by default both: the answer) to `dest`; returns dest."""
    with open(SCRIPT, encoding="utf-8") as f:
        text = f.read()
    for old, new in fixes:
        if old not in text:
            raise ValueError(f"the script no longer contains the line to fix: {old.strip()!r}")
        text = text.replace(old, new)
    with open(dest, "w", encoding="utf-8") as f:
        f.write(text)
    return dest


def solution_diff() -> str:
    """The answer as a unified diff against the script."""
    import difflib
    import tempfile

    with tempfile.TemporaryDirectory(prefix="capstone-") as d:
        fixed = open(solution(os.path.join(d, "train.py")), encoding="utf-8").read()
    old = open(SCRIPT, encoding="utf-8").read()
    return "".join(difflib.unified_diff(old.splitlines(True), fixed.splitlines(True), "train.py", "fixed.py"))


TAILS = ("dropped", "padded", "joined")  # the ways `reference` keeps the samples that do not fill a step


def reference(samples: int, lr: float = 0.1, world: int = WORLD) -> list[list[float]]:
    """The final weights a correct data-parallel run can end with, computed in one process: each step averages the
    gradients of one sample per rank over the world size. One answer per way of the tail (`TAILS`): dropped; padded
    from the start; kept, the ranks without a sample adding zeros (the last step's sum still divided by the world
    size, as Join divides by the initial one)."""
    import torch

    from sandbox.course.capstone_train import make_data

    x, y = make_data(samples)
    out = []
    for indices in (list(range(samples // world * world)),
                    list(range(samples)) + list(range(-samples % world)),
                    list(range(samples))):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for step in range(-(-len(indices) // world)):
            batch = indices[step * world:(step + 1) * world]
            loss = torch.nn.functional.mse_loss(model(x[batch]), y[batch], reduction="sum") / world
            opt.zero_grad()
            loss.backward()
            opt.step()
        out.append(torch.cat([p.detach().flatten() for p in model.parameters()]).tolist())
    return out


@dataclass
class Trial:
    what: str
    bug: str | None
    fixed: bool
    said: str


def run_trial(path: str, what: str, argv: list[str], bug: str | None, world: int = WORLD) -> Trial:
    """One of the check's runs: the script at `path` with `argv` on `world` ranks, against the reference."""
    import tempfile

    from sandbox import run_script

    with tempfile.TemporaryDirectory(prefix="capstone-") as d:
        res = run_script(path, argv=argv, world_size=world, timeout=60, trace_dir=d)
        moved = collectives(res, d)
    if res.verdict != "ok":
        return Trial(what, bug, False, f"{res.verdict}: {res.diagnosis.summary}")
    m = _FINAL.search(res.ranks[0].output or "")
    if m is None:
        return Trial(what, bug, False, "it finished, but rank 0 printed no 'final weights: [...]' line")
    got = ast.literal_eval(m.group(1))
    samples = int(argv[argv.index("--samples") + 1])
    alone = sorted(r for r in range(world) if moved.get(r, 0) < samples // world)
    if alone:
        from sandbox import words

        return Trial(what, bug, False, f"it finished, but {words.ranks(alone)} made fewer collectives than the"
                                       f" {samples // world} steps every rank trains: each step's gradients must be"
                                       f" averaged over the ranks (a rank that trains on everything alone is not"
                                       f" data parallelism)")
    if not any(len(got) == len(w) and all(abs(a - b) <= 1e-4 for a, b in zip(got, w))
               for w in reference(samples, world=world)):
        return Trial(what, bug, False, f"it finished with final weights {got}, which match no single-process "
                                       f"reference (tail {', '.join(TAILS[:-1])} or {TAILS[-1]})")
    if res.warnings:
        return Trial(what, bug, False, f"it finished with the right weights but broke a contract: "
                                       f"{res.warnings[0].summary}")
    return Trial(what, bug, True, "it finished with the single-process reference's weights")


def collectives(res, directory: str) -> dict[int, int]:
    """{rank: collectives that moved data}: as its Flight Recorder dump in `directory` lists them (DDP's own
    all_reduces included), or as the tracer saw them where a rank left no dump."""
    from sandbox import flight
    from sandbox.lab.rules import calls_made

    out = calls_made(res)
    for rank, dump in flight.read_run(directory).items():
        out[rank] = max(out.get(rank, 0), sum(c["op"] != "barrier" for c in flight.calls(dump, rank)))
    return out


@dataclass
class Verdict:
    trials: list[Trial]

    @property
    def found(self) -> list[str]:
        """The bugs fixed: those whose every trial came out right."""
        bugs = dict.fromkeys(t.bug for t in self.trials if t.bug)
        return [b for b in bugs if all(t.fixed for t in self.trials if t.bug == b)]

    @property
    def ok(self) -> bool:
        return all(t.fixed for t in self.trials)

    def __str__(self) -> str:
        n = len(self.found)
        lines = [f"You fixed {n} of {len(BUGS)} bugs" + (", and the script's own run is right." if self.ok else ".")]
        for t in self.trials:
            mark = "fixed" if t.fixed else "not yet"
            lines.append(f"- {t.what}: {mark}: {t.said}")
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def check(path: str = "my_train.py") -> Verdict:
    """Run the learner's copy of the script under each trial's settings (on 4 ranks, the last on 3) and say which
    bugs it still has."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no script at {path}: copy it first with capstone.copy_script({path!r}).")
    return Verdict([run_trial(path, *trial) for trial in TRIALS])
