"""mixed-dtype: one rank trains in bfloat16 while the others reduce float32 gradients by hand: the bytes of the
all_reduce disagree.

Source: a pitfall of mixed precision chosen per rank. A script picks bf16 where the local device supports it
(`torch.cuda.is_bf16_supported()`: on a fleet of mixed GPU generations the ranks disagree; here rank 1's node says
yes) and then averages gradients itself with `dist.all_reduce(p.grad)`. all_reduce (torch/distributed/
distributed_c10d.py) wants the same tensor on every rank: same number of elements and same dtype.

Symptom: a rank dies with SIGABRT: `gloo::EnforceNotMet ... Received data size doesn't match expected size. Is
there a distributed collective mismatch in your code?`; its peers lose the connection (`Connection reset by peer`,
`Connection closed by peer`) or hang in the all_reduce.

Root cause: rank 1's weights, and so its gradients, are bfloat16 (`model.to(torch.bfloat16)`, as pure-bf16 recipes
do, under `torch.autocast`): 2 bytes an element where its peers send 4, at the same all_reduce of the same shape.
(torch.autocast alone would not do it: a gradient takes its parameter's dtype, float32; the bytes differ once a rank
casts its model or its gradients, as a bf16 compression does, or reduces a tensor made under autocast.)

Fix: decide the precision once for all ranks (here: bf16 only if every rank supports it, an all_reduce(MIN) of the
flag), so every rank runs the same autocast, and reduce in float32 (`g = p.grad.float()`) whatever the compute dtype.
Casting the result back to float32 after a mixed all_reduce is too late (the reduce itself fails), and casting
only the gradient leaves rank 1 training other (bf16-rounded) weights than its peers.

On GPUs (NCCL): NCCL checks neither sizes nor dtypes: each rank launches its all_reduce with its own element
type, so the ranks reduce raw bytes of different lengths. The collective may hang until NCCL's watchdog aborts it,
or complete with garbage in the gradients. The sandbox names it from the calls it traced: the dtype per rank, at the
line of the all_reduce. (TORCH_DISTRIBUTED_DEBUG=DETAIL checks the dtypes before every collective and raises.)

Run: python -m sandbox.repro mixed-dtype
    broken: CRASH [collective_mismatch]: 4 ranks in 9.84 s
      Collective mismatch at call #1 of group [0, 1, 2, 3]: ranks 0, 2 and 3 call all_reduce(shape [4, 8],
      float32) at sandbox/bugs/mixed_dtype.py:90; rank 1 calls all_reduce(shape [4, 8], bfloat16) at
      sandbox/bugs/mixed_dtype.py:90. The dtype must be the same on every rank of the group. A dtype differs
      where the ranks compute in different precisions (autocast, a model or its gradients cast to bfloat16 or
      float16 on some ranks only): give every rank the same precision, or cast to one dtype before the call
      (t.float()); casting the result afterwards is too late. Its peers saw: rank 0 then lost its connection
      (Connection closed by peer [127.0.0.1]:39580), a consequence; rank 2 then lost its connection (Read
      error [127.0.0.1]:54426: Connection reset by peer), a consequence; rank 3 then lost its connection
      (Connection closed by peer [127.0.0.1]:25990), a consequence.
      expected: crash or hang or error, collective_mismatch, culprits [1], error /Received data size doesn't match expected size|bfloat16/ -> as documented
    fixed: OK: 4 ranks in 6.96 s
      expected: ok, = single-process reference -> as documented
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from sandbox.bugs import Bug, Expect, Gpu, init

BUG = Bug(
    slug="mixed-dtype", title="One rank in bfloat16, the others reduce float32 gradients",
    source="mixed precision chosen per rank (torch.cuda.is_bf16_supported() differs on a mixed fleet)",
    symptom="Received data size doesn't match expected size: one rank's gradients are bfloat16",
    world_size=4, min_world_size=2, needs="cpu",
    broken=Expect(("crash", "hang", "error"), "collective_mismatch", [1],
                  error=r"Received data size doesn't match expected size|bfloat16"),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect(("hang", "crash", "error"), "collective_mismatch", [1]),
            fixed=Expect("ok", matches_reference=True)))

STEPS, LR = 2, 0.1


def bf16_supported(rank):
    return rank == 1  # stand-in for torch.cuda.is_bf16_supported(): rank 1's node is another GPU generation


def batch(rank, step, device="cpu"):
    g = torch.Generator().manual_seed(10 * rank + step)
    x = torch.randn(16, 8, generator=g)
    return x.to(device), (x @ torch.linspace(-1, 1, 32).reshape(8, 4)).to(device)


def weights(model):
    return torch.cat([p.detach().float().flatten() for p in model.parameters()]).tolist()


def broken():
    device = init()  # gloo on CPU; NCCL with --gpu
    rank, world = dist.get_rank(), dist.get_world_size()
    use_bf16 = bf16_supported(rank)  # BUG: each rank decides its own precision
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(device, torch.bfloat16 if use_bf16 else torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        x, y = batch(rank, step, device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            loss = F.mse_loss(model(x.to(model.weight.dtype)), y.to(model.weight.dtype))
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)  # BUG: bfloat16 on rank 1, float32 on the others
            p.grad /= world
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
    return weights(model)


def fixed():
    device = init()
    rank, world = dist.get_rank(), dist.get_world_size()
    flag = torch.tensor([int(bf16_supported(rank))], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)  # FIX: one precision for all: bf16 only if every rank has it
    use_bf16 = bool(flag.item())
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(device, torch.bfloat16 if use_bf16 else torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        x, y = batch(rank, step, device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            loss = F.mse_loss(model(x.to(model.weight.dtype)), y.to(model.weight.dtype))
        loss.backward()
        for p in model.parameters():
            g = p.grad.float()  # FIX: reduce in float32 whatever the compute dtype
            dist.all_reduce(g)
            p.grad.copy_(g / world)
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
    return weights(model)


def reference(world_size):
    """The same training in float32 in one process: each step averages the ranks' gradients."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        for r in range(world_size):
            x, y = batch(r, step)
            (F.mse_loss(model(x), y) / world_size).backward()
        opt.step()
        opt.zero_grad()
    return weights(model)
