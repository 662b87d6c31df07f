"""The learning path through the labs: parts in the order to take them, and for each lab the time it takes and the
one thing a learner can do after it. The Start-here page, the labs index and the site's "Labs" menu are built from
this list (docs/hooks.py), and tests/test_docs.py holds it to the notebooks in labs/ (each exactly once), so the
path cannot drift from what exists."""
from __future__ import annotations

from typing import NamedTuple


class Step(NamedTuple):
    lab: str        # the notebook's name, without .ipynb
    minutes: int    # about how long it takes to work through, exercises included
    objective: str  # what you can do afterwards, in one sentence


class Part(NamedTuple):
    title: str
    why: str
    steps: tuple[Step, ...]


ROUTE: tuple[Part, ...] = (
    Part("1. The primitives", "What each collective and point-to-point call moves, and what it costs.", (
        Step("00_primitives", 40, "Predict what every rank holds after each torch.distributed primitive, and check "
                                  "your prediction on 4 ranks."),
        Step("20_ring_all_reduce", 40, "Build all_reduce from send and recv around a ring, and get past the "
                                       "deadlock a first attempt writes."),
        Step("21_cost_model", 25, "Predict a collective's time from latency and bandwidth, fit both on this machine, "
                                  "and choose a gradient bucket size."),
    )),
    Part("2. When ranks disagree", "The most common hang: ranks that make different calls, or the same call with "
                                   "different arguments.", (
        Step("03_group_order", 15, "Tell why groups created in a different order on each rank pair the wrong calls."),
        Step("06_gather_uneven", 15, "Gather tensors of different lengths without a mismatch."),
        Step("07_aux_data", 20, "Sync every input of a decision that all ranks must take alike."),
        Step("08_resample_desync", 15, "Keep a data-dependent choice identical on every rank."),
    )),
    Part("3. Point-to-point", "Sends and receives: who waits for whom.", (
        Step("04_kv_sync", 20, "Order blocking sends and receives so that every send meets a posted receive."),
        Step("05_isend_unwaited", 15, "Know when an asynchronous send is finished, and why waiting matters."),
    )),
    Part("4. Start-up and devices", "Rendezvous, backends and devices.", (
        Step("01_init_port", 15, "Make every rank meet at one rendezvous endpoint."),
        Step("02_xpu_device_id", 15, "Create a gloo group beside an accelerator's default group (simulated XPU)."),
        Step("09_cross_device", 15, "Gather results that live on different devices (simulated GPUs)."),
        Step("27_multinode", 20, "Take a script from one node to two: the launcher's MASTER_ADDR, RANK rather than "
                                 "LOCAL_RANK, and GLOO_SOCKET_IFNAME where a hostname resolves to 127.0.1.1."),
    )),
    Part("5. The debugging toolbox", "The tools you have on a real cluster, beside the sandbox.", (
        Step("10_toolbox", 25, "Use TORCH_DISTRIBUTED_DEBUG=DETAIL, monitored_barrier, the Flight Recorder and "
                               "stack dumps, and know what each one tells you."),
    )),
    Part("6. Training parallelism, built by you", "What the collectives are for: you write each one on real ranks "
                                                  "and check it against one process.", (
        Step("22_data_parallel", 45, "Write data parallelism, naive and then with gradient buckets that overlap "
                                     "backward, and compare it with DistributedDataParallel."),
        Step("23_sharding", 45, "Shard optimizer state, then parameters as FSDP does, and measure the memory each "
                                "rank saves."),
        Step("24_tensor_parallel", 35, "Split an MLP column-then-row across ranks with one all_reduce."),
        Step("25_pipeline", 45, "Run a model as a pipeline of stages with send and recv, GPipe then 1F1B, and "
                                "measure the bubble."),
        Step("28_memory_at_scale", 25, "Size a real model's memory per GPU under data parallelism, each ZeRO stage, "
                                       "tensor and pipeline parallelism, and its activations."),
    )),
    Part("7. Framework bugs", "The bugs people hit with DDP, FSDP, samplers, checkpoints and mixed precision.", (
        Step("11_ddp_uneven_inputs", 20, "Train with DDP when ranks have different numbers of batches."),
        Step("12_ddp_unused_parameters", 20, "Keep DDP's gradient all_reduce the same on every rank when a "
                                             "forward skips a block."),
        Step("13_ddp_model_differs", 15, "Build the same model on every rank from per-rank data."),
        Step("14_sampler_set_epoch", 15, "Tell whether a run that finishes did what you meant, against one process."),
        Step("15_no_sync_accumulation", 20, "Accumulate gradients with no_sync() on the same steps everywhere."),
        Step("16_fsdp_wrap_differs", 20, "Apply FSDP's wrapping identically on every rank."),
        Step("17_moe_all_to_all_splits", 20, "Route MoE tokens with all_to_all splits that agree pairwise."),
        Step("18_checkpoint_timeout", 20, "Save a checkpoint without timing out the ranks that wait for it."),
        Step("19_mixed_dtype", 15, "Reduce gradients in one precision on every rank."),
    )),
    Part("8. Capstone", "Everything at once, with no labels.", (
        Step("26_capstone", 30, "Find two distributed bugs in an unlabelled training script with the toolbox."),
    )),
)


def steps() -> list[Step]:
    """Every lab of the route, in route order."""
    return [s for part in ROUTE for s in part.steps]


def hours() -> float:
    """The whole route's time, in hours."""
    return sum(s.minutes for s in steps()) / 60


def markdown(prefix: str = "labs/") -> str:
    """The route as the Start-here page shows it: one table per part (lab, time, what you can do afterwards);
    `prefix` is the path from the page to the labs."""
    out = [f"The whole route takes about {hours():.0f} hours; each lab is one sitting.", ""]
    for part in ROUTE:
        minutes = sum(s.minutes for s in part.steps)
        out += [f"### {part.title}", "", f"{part.why} About {minutes} minutes.", "",
                "| lab | time | afterwards you can |", "| --- | --- | --- |"]
        out += [f"| [{s.lab}]({prefix}{s.lab}.ipynb) | {s.minutes} min | {s.objective} |" for s in part.steps]
        out.append("")
    return "\n".join(out)


def nav(title_of) -> list[dict]:
    """The site's "Labs" menu: one section per part, its labs in route order; `title_of(lab)` is a lab's title."""
    return [{part.title: [{title_of(s.lab): f"labs/{s.lab}.ipynb"} for s in part.steps]} for part in ROUTE]
