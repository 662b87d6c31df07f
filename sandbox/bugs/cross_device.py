"""cross-device: samples gathered from every rank keep their device; stacking them mixes devices.

Source: a real report from an RL trainer that pools generated samples across ranks. `all_gather_object`
(torch/distributed/distributed_c10d.py) pickles each object and unpickles it on every rank
(`_object_to_tensor` / `_tensor_to_object`); a pickled tensor comes back on the device it was saved from.

Symptom: `RuntimeError: Expected all tensors to be on the same device, but got tensors is on cuda:3, different
from other tensors on cuda:2 (when checking argument in method wrapper_CUDA_cat)`.

Root cause: every rank generates samples on its own GPU and `all_gather_object`s them into one global pool.
Objects are pickled with their tensors' devices and unpickled onto the same devices, so rank 2's pool holds
tensors on cuda:0, cuda:1, cuda:2 and cuda:3. Each rank slices its share of the pool (not necessarily its own
samples) and `torch.stack` refuses to mix devices.

Fix: send the samples from the CPU (`.cpu()` before `all_gather_object`: a tensor inside an object is unpickled on
the device it was pickled from), and `.to(device)` every tensor of the share before stacking.

Simulated on CPU: the devices are FakeTensors on "cuda:N" carrying their values beside them; they travel through
the real `all_gather_object` over gloo and come back on their original device; `torch.stack` raises PyTorch's
own device-mismatch check ("Expected all tensors to be on the same device, but found at least two devices,
cuda:0 and cuda:1!"; torch 2.11's FakeTensor words the same check "Unhandled FakeTensor Device Propagation for
aten.stack.default, found two different devices cuda:0, cuda:1", which the sandbox gives in the later words).
A CPU run never touches real CUDA, on a CUDA build with GPUs too. With `--gpu` on 2 or more GPUs it is the real
CUDA error.

On GPUs (NCCL): the real thing. `all_gather_object` unpickles every sample onto the GPU it left from, and
CUDA's own check refuses the stack in the words of the report: "Expected all tensors to be on the same device,
but got tensors is on cuda:1, different from other tensors on cuda:0 (when checking argument in method
wrapper_CUDA_cat)". The CPU run's FakeTensors raise the same check in FakeTensor's words.

Run: python -m sandbox.repro cross-device
    broken: ERROR [rank_error]: 4 ranks in 3.26 s
      Rank 2 raised FakeTensorDeviceMismatchError: Expected all tensors to be on the same device, but found at
      least two devices, cuda:1 and cuda:3! at sandbox/bugs/cross_device.py:109. Its peers saw: ranks 0 and 1
      got FakeTensorDeviceMismatchError: Expected all tensors to be on the same device, but found at least two
      devices, cuda:0 and cuda:2!; rank 3 got FakeTensorDeviceMismatchError: Expected all tensors to be on the
      same device, but found at least two devices, cuda:1 and cuda:3!. Rank 2's failing call at
      sandbox/bugs/cross_device.py:109 got tensors that all_gather_object at sandbox/bugs/cross_device.py:101
      delivered from cuda:0, cuda:1, cuda:3 (a tensor inside an object comes back on the device it was sent
      from).
      Warnings: object_device.
      expected: error, rank_error, error /Expected all tensors to be on the same device/ -> as documented
    fixed: OK: 4 ranks in 3.31 s
      expected: ok, = single-process reference -> as documented
"""
import contextlib
import os

import torch
import torch._subclasses.fake_tensor  # noqa: F401  imported once in the zygote, shared by every rank
import torch.distributed as dist

from sandbox import simulate
from sandbox.bugs import Bug, Expect, Gpu, init

BUG = Bug(
    slug="cross-device", title="torch.stack over samples gathered from every GPU",
    source="an RL trainer's global sample pool (a real report)",
    symptom="RuntimeError: Expected all tensors to be on the same device ...",
    world_size=4, min_world_size=2, needs="simulated",
    broken=Expect("error", "rank_error", error=r"Expected all tensors to be on the same device"),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect("error", "rank_error", error=r"Expected all tensors to be on the same device, but got "
                                                       r"tensors is on cuda:\d, different from other tensors on cuda:\d"),
            fixed=Expect("ok", matches_reference=True)))

SAMPLES_PER_RANK = 2
if not torch.cuda.is_available():  # a CPU run (its zygote sees no GPU): no real CUDA for the fakes to touch
    simulate.warm()  # imported by the zygote: every rank starts with FakeTensors ready


def generate(rank, device):
    g = torch.Generator().manual_seed(1000 + rank)
    samples = []
    for i in range(SAMPLES_PER_RANK):
        rewards = torch.rand(3, generator=g)
        if torch.cuda.is_available():  # --gpu: this rank's real GPU
            samples.append({"rewards": rewards.to(device)})
        else:  # SIMULATED: a tensor on cuda:<rank> that pickles back onto cuda:<rank>
            samples.append(simulate.DeviceSample(rewards=simulate.on_device(rewards, str(device))))
    return samples


def to_cpu(sample):
    """A sample whose tensors leave from the CPU, so they arrive on the CPU on every rank."""
    if torch.cuda.is_available():
        return {k: v.cpu() for k, v in sample.items()}
    return simulate.DeviceSample(rewards=simulate.on_device(sample["rewards"].sim_data, "cpu"))  # SIMULATED


def _run(move):
    real = init().type == "cuda"  # NCCL under --gpu; gloo in a CPU run, whose ranks see no GPU
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    if not real:
        print(f"rank {rank}: devices are simulated (a CPU run): cuda:{rank} is a FakeTensor device")
    pool = [None] * world
    mine = generate(rank, device)
    if move:
        mine = [to_cpu(s) for s in mine]  # FIX: send from the CPU; a pickled tensor arrives where it left from
    dist.all_gather_object(pool, mine)  # every rank's samples, each on its sender's device
    pool = [s for per_rank in pool for s in per_rank]
    share = pool[rank::world]  # this rank's share of the global pool: samples from several ranks
    print(f"rank {rank}: share on {[str(s['rewards'].device) for s in share]}")
    with (contextlib.nullcontext() if real else simulate.devices_checked()):
        if move:
            rewards = torch.stack([s["rewards"].to(device) for s in share])  # FIX: bring the share to this device
        else:  # BUG: the share's tensors, from cuda:0, cuda:1, ..., stacked where they are (the error's line is bare)
            rewards = torch.stack([s["rewards"] for s in share])
    values = [getattr(s["rewards"], "sim_data", s["rewards"]).cpu().tolist() for s in share]
    dist.destroy_process_group()
    return {"device": str(rewards.device), "shape": list(rewards.shape), "rewards": values}


def broken():
    return _run(move=False)


def fixed():
    return _run(move=True)


def reference(world_size):
    """Each rank's share computed in one process: the same samples, pooled and sliced."""
    pool = []
    for r in range(world_size):
        g = torch.Generator().manual_seed(1000 + r)
        pool += [torch.rand(3, generator=g).tolist() for _ in range(SAMPLES_PER_RANK)]
    return {"per_rank": [{"device": f"cuda:{r}", "shape": [len(pool[r::world_size]), 3], "rewards": pool[r::world_size]}
                         for r in range(world_size)]}
