"""Memory per GPU at the scale people train at: a small calculator for the Concepts page and the labs.

What a GPU holds for a model of `params` parameters, split by what it is:
- the model states, as the ZeRO paper counts them (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
  Trillion Parameter Models", 2020, section 3.1): with mixed precision and Adam, 2 bytes of 16-bit parameters, 2 of
  16-bit gradients and K = 12 of optimizer state (a 32-bit copy of the parameters, Adam's two moments) per parameter,
  16 in all; in plain 32-bit, 4 + 4 + 8. ZeRO-1 splits the optimizer state over the N data-parallel ranks, ZeRO-2
  the gradients too, ZeRO-3 (FSDP) the parameters too; tensor and pipeline parallelism split all three over their
  own degree (the layers of a stage, the slices of a layer);
- the activations a transformer layer keeps for backward, as Korthikanti et al. count them ("Reducing Activation
  Recomputation in Large Transformer Models", 2022, section 4): s*b*h*(34 + 5*a*s/h) bytes per layer in 16 bits
  (sequence s, micro-batch b, hidden h, heads a); with tensor parallelism of degree t, s*b*h*(10 + 24/t + 5*a*s/(h*t));
  with sequence parallelism too, all of it divided by t; with full recomputation, only each layer's input, 2*s*b*h.

The figures the calculator must give, against the ZeRO paper's own (its Figure 1: 7.5 billion parameters, 64 GPUs:
120, 31.4, 16.6 and 1.9 GB) and against what the sandbox measures on lab 23's small model, are in
tests/test_course_scale.py.
"""
from __future__ import annotations

from dataclasses import dataclass

# bytes per parameter: (parameters, gradients, optimizer state), by precision (Adam)
BYTES = {"mixed": (2, 2, 12), "fp32": (4, 4, 8)}
STRATEGIES = ("DP", "ZeRO-1", "ZeRO-2", "ZeRO-3", "TP", "PP")


@dataclass(frozen=True)
class States:
    """Bytes of model states one GPU holds."""
    parameters: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.parameters + self.gradients + self.optimizer


def model_states(params: float, strategy: str = "DP", n: int = 1, precision: str = "mixed") -> States:
    """The model states on one GPU of `n` for `params` parameters under `strategy` (one of STRATEGIES; n is the
    data-parallel degree for DP and ZeRO, the tensor- or pipeline-parallel degree for TP and PP)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy is one of {', '.join(STRATEGIES)}, not {strategy!r}.")
    if precision not in BYTES:
        raise ValueError(f"precision is 'mixed' or 'fp32', not {precision!r}.")
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n is a number of GPUs, at least 1, not {n!r}.")
    p, g, k = (b * params for b in BYTES[precision])
    split = {"DP": (1, 1, 1), "ZeRO-1": (1, 1, n), "ZeRO-2": (1, n, n), "ZeRO-3": (n, n, n),
             "TP": (n, n, n), "PP": (n, n, n)}[strategy]
    return States(p / split[0], g / split[1], k / split[2])


def activations(seq: int, micro_batch: int, hidden: int, heads: int, layers: int, tp: int = 1,
                sequence_parallel: bool = False, recompute: bool = False) -> float:
    """Bytes of activations a GPU keeps for backward across `layers` transformer layers (16-bit), per Korthikanti
    et al.: no recomputation, tensor parallelism of degree `tp`, with or without sequence parallelism, or full
    recomputation (each layer's input only)."""
    s, b, h, a, t = seq, micro_batch, hidden, heads, tp
    if recompute:
        per_layer = 2 * s * b * h / (t if sequence_parallel else 1)
    elif sequence_parallel:
        per_layer = s * b * h * (34 + 5 * a * s / h) / t
    else:
        per_layer = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    return per_layer * layers


def table(params: float, n: int, precision: str = "mixed", unit: float = 1e9) -> str:
    """Model states per GPU under data parallelism and each ZeRO stage over n GPUs, in GB (10^9 bytes) by default."""
    lines = [f"{'strategy':10}{'parameters':>12}{'gradients':>12}{'optimizer':>12}{'total':>12}"]
    for s in STRATEGIES[:4]:
        m = model_states(params, s, 1 if s == "DP" else n, precision)
        lines.append(f"{s:10}" + "".join(f"{v / unit:12.3g}" for v in (m.parameters, m.gradients, m.optimizer,
                                                                         m.total)))
    return "\n".join(lines)


def graded(guess: dict, params: float, n: int, precision: str = "mixed", tolerance: float = 0.1) -> str:
    """A learner's guesses of the model states per GPU (GB, by strategy) against the calculator's: right within
    `tolerance` (relative), else the figure."""
    lines = []
    for s, said in guess.items():
        true = model_states(params, s, 1 if s == "DP" else n, precision).total / 1e9
        right = isinstance(said, (int, float)) and abs(said - true) <= tolerance * true
        lines.append(f"{s}: you said {said} GB, it is {true:.3g} GB: " + ("right" if right else "not quite"))
    return "\n".join(lines)


MEASURED = {"data parallel": "DP", "ZeRO-1": "ZeRO-1", "ZeRO-2": "ZeRO-2", "FSDP": "ZeRO-3"}  # lab 23's names


def against(held: dict, params: int, n: int) -> str:
    """What a rank measured (`sharding.measured`'s value: bytes by way and kind, float32 Adam) beside the
    calculator's figures for the same model on the same n ranks."""
    lines = [f"{'bytes on rank 0':16}{'measured':>10}{'formula':>10}{'ratio':>8}"]
    for way, strategy in MEASURED.items():
        got = sum(held[way].values())
        want = model_states(params, strategy, 1 if strategy == "DP" else n, "fp32").total
        lines.append(f"{way:16}{got:>10}{want:>10.0f}{got / want:>8.3f}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- time: the roofline
def _key(strategy: str) -> str:
    key = str(strategy).lower().replace("-", "")
    if key not in ("dp", "zero1", "zero2", "zero3", "tp", "pp"):
        raise ValueError(f"strategy is one of {', '.join(STRATEGIES)}, not {strategy!r}.")
    return key


def comm_bound(strategy: str, *, params: float, layers: int, hidden: int, n: int, flops: float, bandwidth: float,
               tokens: float, latency: float = 0.0, bytes_per_value: int = 2) -> dict:
    """Is one training step of a dense transformer communication-bound? `params` parameters in `layers` layers of
    width `hidden`, on `n` GPUs of `strategy` (one of STRATEGIES; any case, 'zero3' too); each GPU computes at
    `flops` FLOP/s and sends at `bandwidth` bytes/s, `latency` s per message (the alpha-beta model of lab 21, its
    beta being 1/bandwidth); `tokens` per data-parallel replica (DP, ZeRO) or per TP or PP group; numbers of
    `bytes_per_value`. Compute: 6 * params * tokens FLOPs (2 forward, 4 backward), split over n for TP and PP.
    Communication, by ring collectives (`cost.collective_s`): DP and ZeRO-1/2 all-reduce the gradients once (ZeRO's
    reduce-scatter and all-gather move the same bytes); ZeRO-3 all-gathers the parameters for forward and again for
    backward and reduce-scatters the gradients (1.5x); TP all-reduces the activations (tokens x hidden) twice per
    layer in forward and twice in backward (Megatron-LM); PP sends each micro-batch's activations on and their
    gradients back. It is communication-bound when the communication takes longer than the backward it can hide
    behind. {compute_s, hidden_behind_s, comm_s, bound, critical_tokens}: the last is the tokens per GPU below
    which DP or ZeRO is communication-bound (about flops / bandwidth in 16 bits: the scaling book's C / W); None
    for TP and PP, whose communication grows with the tokens as their compute does."""
    from sandbox.course.cost import collective_s

    key = _key(strategy)
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n is a number of GPUs, at least 1, not {n!r}.")
    split = n if key in ("tp", "pp") else 1
    compute, behind = 6 * params * tokens / flops / split, 4 * params * tokens / flops / split
    grads, acts = params * bytes_per_value, tokens * hidden * bytes_per_value
    if key == "zero3":
        comm = 2 * collective_s("all_gather", grads, n, latency, bandwidth) \
            + collective_s("reduce_scatter", grads, n, latency, bandwidth)
    elif key == "tp":
        comm = 4 * layers * collective_s("all_reduce", acts, n, latency, bandwidth)
    elif key == "pp":
        comm = 2 * collective_s("send_recv", acts, n, latency, bandwidth) if n > 1 else 0.0
    else:
        comm = collective_s("all_reduce", grads, n, latency, bandwidth)
    critical = comm * flops / (4 * params) if key not in ("tp", "pp") else None
    return {"compute_s": compute, "hidden_behind_s": behind, "comm_s": comm,
            "bound": "communication" if comm > behind else "compute", "critical_tokens": critical}


def bound_table(cases: list[tuple[str, int, float]], **common) -> str:
    """One line per (strategy, n, tokens) of `comm_bound(strategy, n=n, tokens=tokens, **common)`: the backward's
    time, the communication's, which bounds the step, and (DP, ZeRO) the tokens per GPU below which it is the
    network."""
    from sandbox.course.cost import fmt_s

    lines = [f"{'strategy':9}{'GPUs':>5}{'tokens':>8}{'backward':>10}{'comm':>10}  {'bound by':14}"
             f"{'critical tokens':>15}"]
    for strategy, n, tokens in cases:
        b = comm_bound(strategy, n=n, tokens=tokens, **common)
        crit = "-" if b["critical_tokens"] is None else f"{b['critical_tokens']:.0f}"
        lines.append(f"{strategy:9}{n:>5}{tokens:>8.0f}{fmt_s(b['hidden_behind_s']):>10}{fmt_s(b['comm_s']):>10}  "
                     f"{b['bound']:14}{crit:>15}")
    return "\n".join(lines)
