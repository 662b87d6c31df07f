"""What a bug module declares about itself (`BUG = Bug(...)`) and how the registry reads it without importing it.

A bug module's record may use only literals, `Bug`, `Expect` and `Gpu`, so the parent evaluates it from the
module's source (`read_bug`) with nothing else in scope: listing the catalogue never imports torch. Its docstring
is read the same way, and parsed once (`Bug.parts`, sandbox/bugs/docstring.py). Torch-free.
"""
from __future__ import annotations

import ast
import copy
import importlib
import os
from dataclasses import dataclass, field

from sandbox import branches
from sandbox.bugs import docstring


@dataclass
class Expect:
    """What a variant must show. Every field that is set must hold (sandbox/bugs/expectation.py holds a run to it)."""
    verdict: str | tuple[str, ...] = "ok"              # one verdict, or any of several (gloo hangs or aborts)
    kind: str | None = None                             # the sandbox's diagnosis kind
    culprits: list[int] | str | None = None             # culprit ranks; "others" = every rank but 0, "odd", "last"
    error: str | None = None                            # a regex that some rank's error or output must match
    output: str | None = None                           # a regex that some rank's output must match
    matches_reference: bool = False                     # each rank's value equals reference() (torch.testing)
    # a run that finishes with a wrong answer (a silent bug): some rank's value is NOT reference(). A broken variant
    # that finishes is as documented only when the wrong answer shows, so a run that happened to be right is not
    differs_from_reference: bool = False
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
        if self.differs_from_reference:
            bits.append("!= single-process reference")
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
    # the whole run. Shorter than defaults.RUN_TIMEOUT_S on purpose: every variant ends (or is named a hang) within
    # seconds, so one still running after a minute is broken itself, and a lab's learner should not wait five
    timeout: float = 60.0
    gpu: Gpu | None = None      # the --gpu variant; None: the bug has no GPU form
    # the simulated nodes its ranks are spread over (sandbox.nodes: a network namespace, hostname and address each;
    # needs root), world_size / nnodes on each in rank order, as torchrun --nnodes places them; 1: one host
    nnodes: int = 1
    node_options: dict | None = None  # with nnodes > 1: how the nodes are set up (sandbox.nodes.Cluster's options)
    module: str = field(default="", repr=False)
    _doc: str | None = field(default=None, repr=False, compare=False)  # the module docstring, as the registry read it
    _parts: list | None = field(default=None, init=False, repr=False, compare=False)  # _doc, parsed once

    @property
    def doc(self) -> str:
        """The module's docstring: Symptom, Root cause, Fix, Run."""
        if self._doc is None:
            self._doc = importlib.import_module(self.module).__doc__ or ""
        return self._doc

    @property
    def parts(self) -> dict[str, str]:
        """The docstring's parts by key ("intro", "Source", "Symptom", "Root cause", "Fix", "Simulated", "On GPUs",
        "Run"), each without its label; a part the docstring lacks is absent."""
        return {p.key: p.text for p in self._parsed()}

    @property
    def explanation(self) -> str:
        """Symptom, Root cause, Fix (and Simulated, On GPUs), labels included: the "Why" under a repro run."""
        return docstring.explanation(self._parsed())

    @property
    def on_gpus(self) -> str:
        """The docstring's "On GPUs (NCCL):" paragraph (how NCCL's behaviour differs from gloo's), or ""."""
        return docstring.first_paragraph(self.parts.get("On GPUs", ""))

    def _parsed(self) -> list:
        if self._parts is None:
            self._parts = docstring.parse(self.doc)
        return self._parts

    @property
    def where(self) -> str:
        """'4 ranks', or '4 ranks on 2 nodes'."""
        return f"{self.world_size} ranks" + (f" on {self.nnodes} nodes" if self.nnodes > 1 else "")

    def expect(self, variant: str, gpu: bool = False) -> Expect:
        """What `variant` ("broken" or "fixed") must show, on gloo or (gpu=True) on NCCL."""
        return getattr(self.gpu if gpu else self, variant)


_read: dict[tuple, Bug | None] = {}  # (path, module, mtime, size) -> the record read: parsing is the cost


def read_bug(path: str, module: str) -> Bug | None:
    """The `BUG = Bug(...)` record of a bug module's file, evaluated alone with only Bug, Expect and Gpu in scope,
    and its docstring; None for a module without one. Raises ValueError when the record uses anything else. A file
    is parsed once while it is unchanged (the registry is asked for often: the docs build asked 103 times, 2.5 s);
    each caller gets its own copy."""
    st = os.stat(path)
    key = (path, module, st.st_mtime_ns, st.st_size)
    if key not in _read:
        _read[key] = _parse_bug(path, module)
    return copy.deepcopy(_read[key])


def _parse_bug(path: str, module: str) -> Bug | None:
    with open(path, encoding="utf-8") as f:
        tree = branches.parse(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["BUG"]:
            try:
                bug = eval(compile(ast.Expression(node.value), path, "eval"),  # noqa: S307  our own literals
                           {"__builtins__": {}, "Bug": Bug, "Expect": Expect, "Gpu": Gpu})
            except NameError as e:
                raise ValueError(f"{path}:{node.lineno}: BUG may use only literals, Bug, Expect and Gpu ({e})") from None
            if not isinstance(bug, Bug):
                raise ValueError(f"{path}:{node.lineno}: BUG is not a Bug(...)")
            if not isinstance(bug.nnodes, int) or bug.nnodes < 1 or bug.world_size % bug.nnodes \
                    or bug.min_world_size % bug.nnodes or (bug.node_options and bug.nnodes == 1):
                raise ValueError(f"{path}:{node.lineno}: nnodes={bug.nnodes!r} must be a whole number that divides"
                                 " world_size and min_world_size (node_options only with several nodes)")
            bug.module, bug._doc = module, ast.get_docstring(tree, clean=False) or ""
            return bug
    return None
