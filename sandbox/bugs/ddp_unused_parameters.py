"""ddp-unused-parameters: a captioning model's forward skips its vision layer when a batch has no images; the
dataset is sorted by source, so only rank 0's shard holds images and ranks 1-3 never use that layer.

Source: DistributedDataParallel's reducer (torch/csrc/distributed/c10d/reducer.cpp: "Expected to have finished
reduction in the prior iteration before starting a new one") and its `find_unused_parameters` argument
(torch/nn/parallel/distributed.py). Met wherever a forward takes a branch that depends on the data or the rank:
a modality missing from a batch, an expert no token was routed to, an auxiliary head used on one rank, early
exit. The example from our own files: examples/framework/ddp_unused.py.

Symptom: the second step fails on ranks 1-3 with `RuntimeError: Expected to have finished reduction in the prior
iteration before starting a new one. This error indicates that your module has parameters that were not used in
producing loss.` ("Parameter indices which did not receive grad for rank 1: 2 3"); rank 0 then loses its peers.

Root cause: DDP all_reduces the gradients in buckets, and launches a bucket once every parameter in it has its
gradient. On ranks 1-3 `vision.weight` and `vision.bias` never get one (the forward did not use them), so their
bucket is never all_reduced there, while rank 0, which used them, all_reduces it and waits. At the next forward
DDP finds the previous reduction unfinished and stops.

Fix: there are two, and people use both.
1. Make the graph the same on every rank (`fixed()` here): run the vision layer on every batch, on zeros where a
   batch has no image, and multiply its output by 0 there (or mask it). Its gradient is then a real zero on ranks
   1-3, every bucket is complete on every rank, and the result is what the broken code meant. It costs the
   layer's compute on batches that do not need it.
2. `DistributedDataParallel(model, find_unused_parameters=True)` with the forward unchanged. After every forward
   DDP walks the autograd graph from the outputs to find the parameters it did not reach and marks them ready,
   so their bucket goes out with zeros for them: the same averaged gradient as fix 1, the same communication (the
   skipped layer's gradient is still all_reduced, as zeros). The walk is paid on every step, on every rank, and
   grows with the graph (PyTorch warns: "This flag results in an extra traversal of the autograd graph every
   iteration"). Measured with `step_times()` below on 2 gloo ranks of a shared 2-core machine, a 100-layer MLP whose
   graph is the same on every rank: 1.22x, 1.02x and 1.19x the step time without the flag in three runs (lab 12
   measures it again). Prefer fix 1 where the skipped part is cheap, and the flag where it is not or where which
   parameters go unused cannot be known in advance.
Detaching the skipped layer's output (running it but cutting it from the loss) does not help: a parameter whose
output does not reach the loss gets no gradient, exactly as if it had not run.

On GPUs (NCCL): the same error on ranks 1-3, raised in Python by DDP's reducer at their next forward, before any
collective. Rank 0's bucket all_reduce is queued on the GPU and waits for ranks that never send: rank 0 hangs
(in the next call that waits for the GPU) until NCCL's watchdog aborts it at the process group's timeout, where
gloo tells it at once that its peers are gone.

Run: python -m sandbox.repro ddp-unused-parameters
    broken: ERROR [unused_parameters]: 4 ranks in 7.36 s
      Parameters vision.weight and vision.bias got no gradient on ranks 1-3 but did on rank 0: DDP all_reduces
      a bucket of gradients only once every parameter in it has one, so the ranks stopped agreeing on their
      gradient all_reduces, and ranks 1-3 raised "Expected to have finished reduction in the prior iteration"
      at sandbox/bugs/ddp_unused_parameters.py:128. Rank 0 all_reduced the bucket (all_reduce #4 of group [0,
      1, 2, 3] shape [137] float32 at sandbox/bugs/ddp_unused_parameters.py:130) and waited for ranks that
      never would. The forward takes another path on ranks 1-3: `if image is not None:` at
      sandbox/bugs/ddp_unused_parameters.py:94 uses self.vision, and its test went the other way there (a
      branch on the data). Make the forward use the same parameters on every rank (run the layer everywhere
      and multiply its output by 0 where it is not wanted), or pass find_unused_parameters=True to
      DistributedDataParallel (it then walks the autograd graph after every forward to mark unused parameters
      ready, which costs time each step).
      expected: error, unused_parameters, culprits [0], error /Expected to have finished reduction in the prior iteration/ -> as documented
    fixed: OK: 4 ranks in 8.64 s
      expected: ok, = single-process reference -> as documented
"""
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from sandbox.bugs import Bug, Expect, Gpu, init

BUG = Bug(
    slug="ddp-unused-parameters", title="DDP over a forward that skips a layer on some ranks",
    source="DDP's reducer: parameters that got no gradient on some ranks (torch/nn/parallel/distributed.py)",
    symptom="RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one",
    world_size=4, min_world_size=2, needs="cpu",
    broken=Expect("error", "unused_parameters", [0],
                  error=r"Expected to have finished reduction in the prior iteration"),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect(("error", "hang", "crash"), "unused_parameters", [0],
                          error=r"Expected to have finished reduction in the prior iteration before starting a new"
                                r" one"),
            fixed=Expect("ok", matches_reference=True)))

TEXT, IMAGE, BATCH, STEPS, LR = 8, 6, 4, 3, 0.1


class Captioner(torch.nn.Module):
    """Text features, plus image features where the batch has images, then a head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.text = torch.nn.Linear(TEXT, 8)
        self.vision = torch.nn.Linear(IMAGE, 8)
        self.head = torch.nn.Linear(8, 1)

    def forward(self, tokens, image=None):
        h = torch.tanh(self.text(tokens))
        if image is not None:  # BUG: a text-only batch skips self.vision, so its parameters get no gradient
            h = h + self.vision(image)
        return self.head(h)


class SameGraphCaptioner(Captioner):
    """The same model, with self.vision on every batch: on zeros, times 0, where a batch has no image."""

    def forward(self, tokens, image=None):
        h = torch.tanh(self.text(tokens))
        has_image = image is not None
        if not has_image:
            image = tokens.new_zeros(tokens.shape[0], IMAGE)
        h = h + self.vision(image) * float(has_image)  # FIX: every rank uses self.vision; a real 0 where unwanted
        return self.head(h)


def shard(rank, world, device="cpu"):
    """This rank's STEPS batches of (tokens, image or None, target). The dataset is sorted by source, image-caption
    pairs first, and cut into contiguous shards: rank 0's shard holds every image."""
    out = []
    for i in range(STEPS):
        g = torch.Generator().manual_seed(100 * rank + i)
        tokens, target = torch.randn(BATCH, TEXT, generator=g), torch.randn(BATCH, 1, generator=g)
        image = torch.randn(BATCH, IMAGE, generator=g) if rank == 0 else None
        out.append((tokens.to(device), None if image is None else image.to(device), target.to(device)))
    return out


def train(model, device, **ddp_options):
    """STEPS steps of DDP over `model` on this rank's shard; the final weights by name."""
    ddp = DDP(model.to(device), device_ids=[device.index] if device.type == "cuda" else None, **ddp_options)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    for tokens, image, target in shard(dist.get_rank(), dist.get_world_size(), device):
        loss = torch.nn.functional.mse_loss(ddp(tokens, image), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {name: p.detach().cpu().tolist() for name, p in model.named_parameters()}


def broken():
    device = init()  # gloo on CPU; NCCL with --gpu
    out = train(Captioner(), device)  # BUG: ranks 1-3 never use self.vision (see Captioner.forward)
    dist.destroy_process_group()
    return out


def fixed():
    device = init()
    out = train(SameGraphCaptioner(), device)  # FIX: the same graph on every rank (or find_unused_parameters=True)
    dist.destroy_process_group()
    return out


def reference(world_size):
    """The same steps in one process: each step's gradient is the mean of the ranks' gradients, with zeros for the
    vision layer where a rank's batch had no image (what both fixes all_reduce)."""
    model = Captioner()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    shards = [shard(r, world_size) for r in range(world_size)]
    for i in range(STEPS):
        opt.zero_grad()
        for s in shards:
            tokens, image, target = s[i]
            (torch.nn.functional.mse_loss(model(tokens, image), target) / world_size).backward()
        opt.step()
    return {name: p.detach().tolist() for name, p in model.named_parameters()}


def step_times(depth=100, width=16, steps=40):
    """Median seconds per DDP step (forward, backward with its all_reduces, SGD step) of a `depth`-layer MLP whose
    graph is the same on every rank, as {"plain": ..., "find_unused": ...}: two copies of the model, one wrapped
    with find_unused_parameters=True, stepped in turn so that both meet the same load. Run it on the ranks of a job
    (lab 12 does, with sandbox.launch); every rank returns its own medians."""
    device = init()
    models, opts, times = {}, {}, {"plain": [], "find_unused": []}
    for key in times:
        torch.manual_seed(0)
        layers = []
        for _ in range(depth):
            layers += [torch.nn.Linear(width, width), torch.nn.Tanh()]
        models[key] = DDP(torch.nn.Sequential(*layers).to(device), find_unused_parameters=key == "find_unused")
        opts[key] = torch.optim.SGD(models[key].parameters(), lr=1e-3)
    x = torch.randn(16, width, device=device)
    for _ in range(steps):
        for key, model in models.items():
            t0 = time.perf_counter()
            loss = model(x).pow(2).mean()
            opts[key].zero_grad()
            loss.backward()
            opts[key].step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[key].append(time.perf_counter() - t0)
    dist.destroy_process_group()
    kept = {k: sorted(ts[steps // 4:]) for k, ts in times.items()}  # without the warm-up steps
    return {k: ts[len(ts) // 2] for k, ts in kept.items()}
