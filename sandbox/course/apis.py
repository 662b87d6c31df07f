"""PyTorch's own APIs for what the build-it labs write by hand: the same model, the same data, the same reference.

Each function runs on a rank as the lab's reference solution does, and returns what the lab's check compares with
one process, so that `lab.check(fn, reference=...)` holds PyTorch's version to the same numbers as the learner's:
- `ddp` (lab 22): `torch.nn.parallel.DistributedDataParallel`, with `find_unused_parameters=True` for the head
  some ranks do not use;
- `fsdp2` (lab 23): `torch.distributed.fsdp.fully_shard` on every Linear of lab 23's model and on the model, over a
  1-D CPU DeviceMesh; its parameters become DTensors sharded on dim 0, and Adam steps each rank's shards;
- `tensor_parallel` (lab 24): `torch.distributed.tensor.parallel.parallelize_module` with `ColwiseParallel` on the
  first Linear and `RowwiseParallel` on the second, the split lab 24 builds by hand (f and g included); `dp_tp`,
  the same split inside each data-parallel replica of a 2-D DeviceMesh (FSDP2 over the replicas);
- `pipeline` (lab 25): `torch.distributed.pipelining`'s `PipelineStage` run by `ScheduleGPipe` or `Schedule1F1B`
  (which refuses fewer micro-batches than stages).
All run on gloo and the CPU. FSDP2's and DTensor's collectives are functional collectives and DDP's run in its C++
reducer: the tracer does not list them (the Flight Recorder does). The labs' rules that count the learner's calls
are not asked of any of these.
"""
from __future__ import annotations

import torch
from torch import nn


def _cpu_mesh():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (dist.get_world_size(),))


def _full(t: torch.Tensor) -> torch.Tensor:
    """A DTensor as the whole tensor (every rank's shards gathered); a plain tensor as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def fsdp2() -> dict:
    """Lab 23's training with FSDP2: each Linear, then the model, `fully_shard`ed; Adam on the sharded parameters;
    every rank trains on its share of each batch. Returns the full weights by the reference's names, as lists."""
    from torch.distributed.fsdp import fully_shard

    from sandbox.course import sharding as sh

    rank, world = sh.setup()
    model = sh.make_model()
    mesh = _cpu_mesh()
    for m in model:
        if isinstance(m, nn.Linear):
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    adam = torch.optim.Adam(model.parameters(), lr=sh.LR)
    for step in range(sh.STEPS):
        x, y = sh.local(step, rank, world)
        adam.zero_grad()
        sh.loss_fn(model(x), y).backward()  # FSDP2 reduce-scatters each layer's gradient, averaged over the ranks
        adam.step()
    return {name: _full(p.detach()).reshape(-1).tolist() for name, p in model.named_parameters()}  # as sh.weights


def _tp_model() -> nn.Sequential:
    """Lab 24's MLP as torch modules, with its weights: Linear(D -> H), GELU, Linear(H -> D)."""
    from sandbox.course import tensor_parallel as tp

    w = tp.weights()
    model = nn.Sequential(nn.Linear(tp.D, tp.H), nn.GELU(), nn.Linear(tp.H, tp.D))
    with torch.no_grad():
        for m, (wk, bk) in ((model[0], ("w1", "b1")), (model[2], ("w2", "b2"))):
            m.weight.copy_(w[wk])
            m.bias.copy_(w[bk])
    return model


def tensor_parallel() -> dict:
    """Lab 24's MLP split by DTensor: the same weights and batch, forward and backward; returns what `tp.tp_mlp`
    returns (this rank's slices of w1, b1 and w2's gradients, all of b2's)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from sandbox.course import tensor_parallel as tp

    tp.setup()
    model = _tp_model()
    parallelize_module(model, _cpu_mesh(), {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x, target = tp.batch()
    x.requires_grad_()
    y = model(x)
    tp.loss_fn(y, target).backward()

    def local(g):
        return g.to_local() if hasattr(g, "to_local") else g

    return {"y": y.detach().clone(), "grad_x": x.grad, "grad_w1": local(model[0].weight.grad),
            "grad_b1": local(model[0].bias.grad), "grad_w2": local(model[2].weight.grad),
            "grad_b2": _full(model[2].bias.grad)}


def ddp(steps: int | None = None) -> dict:
    """Lab 22's training with PyTorch's DistributedDataParallel: the same model, data and SGD as `dp.naive`.
    `find_unused_parameters=True`: the `extra` head takes no part in the forward of a rank without hard samples,
    and DDP must still give it the average (zeros from that rank), as part 1's fix does by hand."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from sandbox.course import data_parallel as dp

    rank, world = dp.setup()
    model = dp.make_model()
    net = DDP(model, find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=dp.LR)
    for step in range(dp.STEPS if steps is None else steps):
        x, y, hard = dp.local(step, rank, world)
        opt.zero_grad()
        dp.loss_fn(net(x, hard), y).backward()  # DDP averages the gradients inside backward
        opt.step()
    return dp.weights(model)


def pipeline(schedule: str = "1f1b", m: int = 8) -> dict:
    """Lab 25's model with `torch.distributed.pipelining`: this rank's stage as a `PipelineStage`, run by
    `ScheduleGPipe` or `Schedule1F1B` on m micro-batches (whose gradients it averages over them, `scale_grads`);
    returns this stage's gradients, as the lab's schedules do. Without the lab's simulated compute time."""
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    from sandbox.course import pipeline as pp

    rank, world = dist.get_rank(), dist.get_world_size()

    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            p = pp.stage_params(rank)
            self.w, self.b = nn.Parameter(p["w"].detach()), nn.Parameter(p["b"].detach())

        def forward(self, x):
            return pp.apply_stage({"w": self.w, "b": self.b}, x)

    stage = Stage()
    runner = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule](
        PipelineStage(stage, stage_index=rank, num_stages=world, device=torch.device("cpu")), n_microbatches=m,
        loss_fn=lambda y, target: ((y - target) ** 2).mean())
    data = pp.micro_batches(m)
    x, target = torch.cat([xb for xb, _ in data]), torch.cat([t for _, t in data])
    if rank == 0:
        runner.step(x)
    elif rank == world - 1:
        runner.step(target=target, losses=[])
    else:
        runner.step()
    return {"w": stage.w.grad, "b": stage.b.grad}


def dp_tp(dp: int = 2) -> dict:
    """Lab 24's MLP on a 2-D DeviceMesh: `dp` data-parallel replicas (mesh dim "dp"), each a tensor-parallel group of
    world / dp ranks (dim "tp"). `parallelize_module` splits the two Linears over "tp" as `tensor_parallel` does, then
    FSDP2's `fully_shard` over "dp" shards the result across the replicas and averages their gradients; replica d
    trains on its share of the batch. Returns every parameter's whole gradient, which `dp_tp_reference` gives from
    one process on the whole batch."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from sandbox.course import tensor_parallel as tp

    tp.setup()
    world = dist.get_world_size()
    if world % dp:
        raise ValueError(f"{world} ranks do not split into {dp} data-parallel replicas.")
    mesh = init_device_mesh("cpu", (dp, world // dp), mesh_dim_names=("dp", "tp"))
    model = _tp_model()
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    x, target = tp.batch()
    replica = mesh.get_local_rank("dp")
    tp.loss_fn(model(x.tensor_split(dp)[replica]), target.tensor_split(dp)[replica]).backward()
    return {name: p.grad.full_tensor() for name, p in model.named_parameters()}


def dp_tp_reference(n: int, dp: int = 2) -> dict:
    """`dp_tp`'s gradients from one process: the whole MLP on the whole batch (equal shares average to it)."""
    from sandbox.course import tensor_parallel as tp

    model = _tp_model()
    x, target = tp.batch()
    tp.loss_fn(model(x), target).backward()
    return {name: p.grad for name, p in model.named_parameters()}
