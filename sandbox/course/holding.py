"""What a rank holds, read from the tensors themselves, for lab 23 (`sandbox.course.sharding`): the bytes behind
parameters, gradients and optimizer state (`memory`, a table of them: `memory_table`), and which layers' full
parameters, gathered for a forward, the autograd graph keeps for the backward (`kept_for_backward`, FSDP's rule).
"""
from __future__ import annotations

import torch


def nbytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (None skipped; views into one buffer count it once)."""
    seen = {}
    for t in tensors:
        if t is not None:
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def memory(params, optimizer) -> dict:
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    return {"parameters": nbytes(params), "gradients": nbytes(p.grad for p in params),
            "optimizer state": nbytes(state)}


def kept_for_backward(loss, layers) -> set[int]:
    """The layers whose full parameters, gathered for this step's forward, the autograd graph behind `loss` holds
    for backward: saved with save_for_backward, or kept as an attribute of ctx (a custom Function's ctx is its node
    in the graph). Only copies still alive are looked for, by their storage: a freed one's address may be reused."""
    alive = {}
    for m in layers:
        flat = m.forward_copy() if m.forward_copy is not None else None
        if flat is not None:
            alive[flat.untyped_storage().data_ptr()] = m.index
    # `seen` by id, with every node visited kept alive in `walked`: torch 2.11 makes a new Python object for a node
    # each time one is asked for, and a freed one's id was reused by the next (its walk stopped at the first layer)
    found, seen, walked, todo = set(), set(), [], [loss.grad_fn]
    while todo and alive:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        walked.append(node)
        held = list(vars(node).values()) if hasattr(node, "__dict__") else []
        try:
            held += list(getattr(node, "saved_tensors", None) or ())
        except RuntimeError:  # already freed (a graph run once)
            pass
        for v in held:
            for t in v if isinstance(v, (list, tuple)) else (v,):
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in alive:
                    found.add(alive[t.untyped_storage().data_ptr()])
        todo += [f for f, _ in node.next_functions]
    return found


PEAK = "gradients at their peak"  # in `sharding.measured`: the gradients' bytes at their fullest within a step


def memory_table(res) -> str:
    """Rank 0's bytes per kind and in all, each way against plain data parallelism (what it holds between steps),
    and the gradients' bytes at their peak within a step, where measured."""
    v = res.ranks[0].value if res.ranks else None
    if not isinstance(v, dict):
        return f"no table: the run ended {res.verdict} ({res.diagnosis.summary})"
    v = dict(v)
    peaks = v.pop(PEAK, {})
    kinds = list(v["data parallel"])
    lines = [f"{'bytes on rank 0':16}" + "".join(f"{k:>17}" for k in kinds) + f"{'total':>17}"]
    base = v["data parallel"]
    for way, held in v.items():
        cells = [f"{held[k]:>8} ({held[k] / base[k]:4.2f}x)" for k in kinds]
        total, whole = sum(held.values()), sum(base.values())
        lines.append(f"{way:16}" + "".join(f"{c:>17}" for c in cells) + f"{f'{total} ({total / whole:4.2f}x)':>17}")
    if peaks:
        base = peaks["data parallel"]
        lines.append("gradients at their peak within a step: " + ", ".join(
            f"{way} {b} ({b / base:4.2f}x)" for way, b in peaks.items()))
    return "\n".join(lines)
