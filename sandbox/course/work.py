"""What a rank's code computed, and when its backward ran: measured inside the rank, for the build-it labs' checks.

`measured(fn)` runs a learner's function as it is, with two instruments around it:
- torch's own FLOP counter (`torch.utils.flop_counter.FlopCounterMode`), which counts the matrix products the rank
  runs, forward and backward: how much of the model's work this rank did (`flops`);
- a note when each backward starts and ends (`torch.autograd.backward`, which `Tensor.backward` calls, and
  `torch.autograd.grad`): which of the rank's calls ran inside backward (`backward_spans`, `during`).
Both go into the rank's trace as notes (`sandbox.lab.note`) and are read back in the parent from the run's events.
"""
from __future__ import annotations

import functools


def measured(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` on a rank, with the instruments above; its value is fn's. Run it with `fn` as the
    first of launch's (or lab.check's) args: fn travels as an argument, by value where it must."""
    import torch.autograd
    from torch.utils.flop_counter import FlopCounterMode

    from sandbox import lab

    real = {"backward": torch.autograd.backward, "grad": torch.autograd.grad}

    def noted(name):
        def run(*a, **k):
            lab.note(backward="start")
            try:
                return real[name](*a, **k)
            finally:
                lab.note(backward="end")
        return functools.update_wrapper(run, real[name])

    torch.autograd.backward, torch.autograd.grad = noted("backward"), noted("grad")
    try:
        with FlopCounterMode(display=False) as counted:
            out = fn(*args, **kwargs)
    finally:
        torch.autograd.backward, torch.autograd.grad = real["backward"], real["grad"]
    lab.note(matmul_flops=counted.get_total_flops())
    return out


def single_process_flops(fn, *args, **kwargs) -> int:
    """The FLOPs of matrix products `fn(*args, **kwargs)` runs in this process (a single-process reference)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counted:
        fn(*args, **kwargs)
    return counted.get_total_flops()


def flops(res) -> dict[int, int]:
    """{rank: FLOPs of its matrix products} of a run of `measured` (a rank that did not finish is absent)."""
    out = {}
    for e in res.events:
        fields = (e.get("fields") or {}) if e.get("ev") == "note" else {}
        if "matmul_flops" in fields:
            out[e["rank"]] = fields["matmul_flops"]
    return out


def backward_spans(res) -> dict[int, list[tuple[float, float]]]:
    """{rank: [(start, end), ...]}: when each of its backwards ran, from the notes 'backward: start' and 'end'."""
    from sandbox.events import noted_spans

    return noted_spans(res.events)


def during(res, op: str, only_async: bool = False) -> dict[int, int]:
    """{rank: how many calls of `op` it started while one of its backwards ran}, every rank of the run listed."""
    spans = backward_spans(res)
    out = {r.rank: 0 for r in res.ranks}
    for e in res.events:
        if e.get("ev") == "enter" and e.get("op") == op and (e.get("async") or not only_async):
            if any(a <= e["t"] <= b for a, b in spans.get(e["rank"], ())):
                out[e["rank"]] = out.get(e["rank"], 0) + 1
    return out
