"""A run's values against the single-process reference: which rank differs, where in its value, and by what.

Rank 0 of a fixed variant (or of a learner's fix) also computes the bug module's `reference()`, with no
distributed code at all, and returns it beside its own value (sandbox/bugs/_entry.py); every rank's value must
equal it, or its `per_rank` entry.

Equality is torch.testing.assert_close's: tensors are compared by `assert_close` itself (its tolerances for their
dtype); lists and tuples must have the same length, dicts the same keys, and are compared item by item; numbers are
compared the way `assert_close` compares them (same type, |got - want| <= atol + rtol * |want|, NaN unequal) with
float32's default tolerances, because a float a rank returns came from a float32 tensor (`.tolist()`) and float32
sums made in another order differ in their last bits. The numbers are compared here rather than handed to torch so
that the parent of a run, which never imports torch, need not import it to compare a list of floats.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass

RTOL, ATOL = 1.3e-6, 1e-5  # torch.testing.assert_close's defaults for float32


@dataclass(frozen=True)
class Difference:
    """Where a rank's value first departs from the reference: `where` is an index path ("[1]['tokens']", '' for the
    whole value) and `got` / `want` the two parts there."""
    rank: int
    where: str
    got: object
    want: object

    def sentence(self) -> str:
        """What follows "Rank N": "returned a wrong value: ['sent_tokens'] is 74, the single-process reference has
        37", or for a value wrong as a whole "returned None, the single-process reference is [1.0, 2.0]"."""
        if not self.where:
            return f"returned {brief(self.got)}, the single-process reference is {brief(self.want)}"
        return (f"returned a wrong value: {self.where} is {brief(self.got)}, the single-process reference has"
                f" {brief(self.want)}")


def reference_of(res):
    """The reference rank 0 computed beside its own value, or None (no reference, or rank 0 did not finish)."""
    v = res.ranks[0].value if res.ranks else None
    return v.get("reference") if isinstance(v, dict) else None


def wanted(reference, rank: int):
    """What `rank` must return: the reference, or its own entry of a `{"per_rank": [...]}` reference."""
    if isinstance(reference, dict) and set(reference) == {"per_rank"}:
        return reference["per_rank"][rank]
    return reference


def differences(res, reference) -> list[Difference]:
    """Every rank whose value is not the reference, with where it first differs, in rank order."""
    out = []
    for r in res.ranks:
        got = (r.value or {}).get("value")
        where = first_difference(got, wanted(reference, r.rank))
        if where is not None:
            out.append(Difference(r.rank, *where))
    return out


def first_difference(got, want, where: str = "") -> tuple[str, object, object] | None:
    """(index path, got there, wanted there) where two values first differ, or None when they are equal. Descends
    into lists and dicts while their shapes agree, so a long value is summed up by the part that is wrong."""
    if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)):
        if len(got) != len(want):
            return where, got, want
        for i, (g, w) in enumerate(zip(got, want)):
            found = first_difference(g, w, f"{where}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(got, dict) and isinstance(want, dict):
        if got.keys() != want.keys():
            return where, got, want
        for k in want:
            found = first_difference(got[k], want[k], f"{where}[{k!r}]")
            if found is not None:
                return found
        return None
    return None if _leaf_equal(got, want) else (where, got, want)


def _leaf_equal(got, want) -> bool:
    torch = sys.modules.get("torch")  # a tensor can only be here if unpickling it imported torch
    if torch is not None and (isinstance(got, torch.Tensor) or isinstance(want, torch.Tensor)):
        try:
            torch.testing.assert_close(got, want)
        except (AssertionError, TypeError, ValueError, RuntimeError):  # not close, or not comparable: not equal
            return False
        return True
    if isinstance(got, bool) or isinstance(want, bool):  # a flag is not the number 1, as in assert_close
        return type(got) is type(want) and got == want
    if type(got) in (int, float) and type(want) in (int, float):
        if type(got) is not type(want):
            return False  # assert_close: "The (d)types do not match: <class 'int'> != <class 'float'>"
        if type(got) is int or math.isinf(want):
            return got == want
        return abs(got - want) <= ATOL + RTOL * abs(want)  # NaN is never close, as with equal_nan=False
    return got == want


def brief(x, n: int = 80) -> str:
    s = repr(x)
    return s if len(s) <= n else s[:n - 3] + "..."
