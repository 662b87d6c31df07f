"""The bug catalogue: one module per bug, each with `broken()` and `fixed()` side by side and a `BUG` record.

Adding a bug is adding one module here; the CLI (`python -m sandbox.repro`), the tests and the docs read this
registry. A module defines:

    BUG = Bug(slug=..., title=..., source=..., symptom=..., world_size=4, min_world_size=2, needs="cpu",
              broken=Expect(...), fixed=Expect(...),
              gpu=Gpu(broken=Expect(...), fixed=Expect(...)))   # optional: what --gpu shows
    def broken(**kw): ...      # runs on every rank, like the code of the real report
    def fixed(**kw): ...
    def reference(**kw): ...   # optional: the single-process answer the fixed variant must match
    def options(world_size, gpu) -> dict   # optional: keyword arguments chosen in the parent (ports, sizes)

Nothing here imports torch, and neither does reading the registry: the parent reads each module's source (its
docstring and its `BUG = Bug(...)` assignment, which may use only literals, Bug, Expect and Gpu) without importing
it, so `python -m sandbox.repro --list` answers at once. The modules' functions, and their torch, run in the ranks.

A run without `--gpu` is a CPU run on any machine and any torch build: its ranks see no GPU (the launcher empties
CUDA_VISIBLE_DEVICES), so `torch.cuda.is_available()` is False there and a bug's code takes its gloo path. Under
`--gpu` each rank owns one GPU and `init()` below starts NCCL on it, as the reported code did.
"""
from __future__ import annotations

import ast
import importlib
import os
import pkgutil
import re
from dataclasses import dataclass, field


@dataclass
class Expect:
    """What a variant must show. Every field that is set must hold."""
    verdict: str | tuple[str, ...] = "ok"              # one verdict, or any of several (gloo hangs or aborts)
    kind: str | None = None                             # the sandbox's diagnosis kind
    culprits: list[int] | str | None = None             # culprit ranks; "others" = every rank but 0, "odd"
    error: str | None = None                            # a regex that some rank's error or output must match
    output: str | None = None                           # a regex that some rank's output must match
    matches_reference: bool = False                     # each rank's value equals reference() (torch.testing)
    warns: str | None = None                            # a run that finishes must carry this contract warning kind
    note: str = ""                                      # how to read it, in one line

    def describe(self) -> str:
        v = self.verdict if isinstance(self.verdict, str) else " or ".join(self.verdict)
        bits = [v]
        if self.kind:
            bits.append(self.kind)
        if self.culprits is not None:
            bits.append(f"culprits {self.culprits}")
        if self.error:
            bits.append(f"error /{self.error}/")
        if self.matches_reference:
            bits.append("= single-process reference")
        if self.warns:
            bits.append(f"warning {self.warns} if it finishes")
        return ", ".join(bits)


@dataclass
class Gpu:
    """What the bug shows on real GPUs (`--gpu`: NCCL, one GPU per rank). How that differs from gloo is the
    docstring's "On GPUs (NCCL):" paragraph, which `repro` and the docs page show."""
    broken: Expect
    fixed: Expect
    min_world_size: int = 2


@dataclass
class Bug:
    slug: str
    title: str
    source: str
    symptom: str
    broken: Expect
    fixed: Expect
    world_size: int = 4
    min_world_size: int = 2
    needs: str = "cpu"          # cpu | gpu | simulated (runs on CPU, with absent hardware simulated)
    timeout: float = 60.0
    gpu: Gpu | None = None      # the --gpu variant; None: the bug has no GPU form
    module: str = field(default="", repr=False)
    _doc: str | None = field(default=None, repr=False, compare=False)  # the module docstring, as the registry read it

    @property
    def doc(self) -> str:
        """The module's docstring: Symptom, Root cause, Fix, Run."""
        if self._doc is None:
            self._doc = importlib.import_module(self.module).__doc__ or ""
        return self._doc

    @property
    def on_gpus(self) -> str:
        """The docstring's "On GPUs (NCCL):" paragraph (how NCCL's behaviour differs from gloo's), or ""."""
        m = re.search(r"^On GPUs \(NCCL\): (.*?)(?:\n\s*\n|\Z)", self.doc, re.S | re.M)
        return " ".join(m.group(1).split()) if m else ""

    def expect(self, variant: str, gpu: bool = False) -> Expect:
        """What `variant` ("broken" or "fixed") must show, on gloo or (gpu=True) on NCCL."""
        return getattr(self.gpu if gpu else self, variant)


def init(timeout_s: float = 60.0, **kwargs):
    """init_process_group as the reported code calls it: NCCL when the rank has a GPU (`--gpu`), gloo otherwise.
    Returns the device this rank's tensors live on: its own GPU under NCCL, the CPU under gloo."""
    import datetime

    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()  # True only under --gpu: the ranks of a CPU run see no GPU
    dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=timeout_s), **kwargs)
    return torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")


def registry() -> dict[str, Bug]:
    """Every bug of the catalogue by slug, read from the modules' source without importing them (no torch)."""
    bugs = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.ispkg:
            continue
        bug = read_bug(os.path.join(info.module_finder.path, info.name + ".py"), f"{__name__}.{info.name}")
        if bug is not None:
            bugs[bug.slug] = bug
    return bugs


def read_bug(path: str, module: str) -> Bug | None:
    """The `BUG = Bug(...)` record of a bug module's file, evaluated alone with only Bug and Expect in scope, and
    its docstring; None for a module without one. Raises ValueError when the record uses anything else."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["BUG"]:
            try:
                bug = eval(compile(ast.Expression(node.value), path, "eval"),  # noqa: S307  our own literals
                           {"__builtins__": {}, "Bug": Bug, "Expect": Expect, "Gpu": Gpu})
            except NameError as e:
                raise ValueError(f"{path}:{node.lineno}: BUG may use only literals, Bug, Expect and Gpu ({e})") from None
            if not isinstance(bug, Bug):
                raise ValueError(f"{path}:{node.lineno}: BUG is not a Bug(...)")
            bug.module, bug._doc = module, ast.get_docstring(tree, clean=False) or ""
            return bug
    return None


def check(bug: Bug, expect: Expect, res, reference=None, debug: bool = False) -> tuple[bool, list[str]]:
    """Does a RunResult show what `expect` documents? Returns (ok, reasons it did not).
    With TORCH_DISTRIBUTED_DEBUG on, PyTorch's own check may turn a documented hang into an error first."""
    why = []
    verdicts = (expect.verdict,) if isinstance(expect.verdict, str) else expect.verdict
    if debug and "hang" in verdicts:
        verdicts = tuple(verdicts) + ("error", "crash")
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
        ref = reference if reference is not None else _reference_of(res)
        if ref is None:
            why.append("no reference to compare with")
        else:
            for r in res.ranks:
                got = (r.value or {}).get("value")
                want = ref
                if isinstance(ref, dict) and set(ref) == {"per_rank"}:
                    want = ref["per_rank"][r.rank]
                if not close(got, want):
                    why.append(f"rank {r.rank} differs from the single-process reference: {_brief(got)} != {_brief(want)}")
    return not why, why


def culprit_ranks(culprits: list[int] | str, world_size: int) -> list[int]:
    """An Expect's culprits for a run of `world_size` ranks."""
    named = {"others": range(1, world_size), "odd": range(1, world_size, 2)}
    return list(named[culprits]) if isinstance(culprits, str) else culprits


def _reference_of(res):
    v = res.ranks[0].value if res.ranks else None
    return v.get("reference") if isinstance(v, dict) else None


def close(a, b, rtol=1e-5, atol=1e-6) -> bool:
    """Recursive equality with a float tolerance (float32 sums in another order differ in the last bits)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(close(x, y, rtol, atol) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], rtol, atol) for k in a)
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    return abs(a - b) <= atol + rtol * abs(b)


def _brief(x, n=80) -> str:
    s = repr(x)
    return s if len(s) <= n else s[:n - 3] + "..."
