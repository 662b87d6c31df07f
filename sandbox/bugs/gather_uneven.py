"""gather-uneven: all_gather of tensors whose length differs from rank to rank.

Source: a pitfall of the primitive itself. `all_gather` (torch/distributed/distributed_c10d.py) wants an output
list of "correctly-sized tensors" and says uneven sizes are supported, but gloo's allgather
(torch/csrc/distributed/c10d/ProcessGroupGloo.cpp) wants every tensor the size of this rank's input: even a
correctly sized list fails there with "ProcessGroupGloo::allgather: invalid tensor size at index 1 (expected (2),
got (3))" (torch 2.13), and sizes that disagree across ranks break the transport.

Symptom: the collective never completes, or a rank dies with SIGABRT:
`gloo::EnforceNotMet ... Received data size doesn't match expected size`.

Root cause: each rank brings its own number of items (here rank r has r + 2), but all_gather moves fixed-size
buffers: every rank allocates the output from its own idea of the size, and the bytes on the wire disagree.

Fix: gather the lengths first, pad every contribution to the longest, all_gather the padded tensors, then cut
each one back to its real length.

On GPUs (NCCL): no error at all. NCCL checks no sizes: each rank's all_gather kernel waits for bytes that
never come, a silent hang in the GPU stream where gloo aborts a rank with a size error. The sandbox names it from
the calls still in flight: the same collective mismatch, shapes [2] and [3].

Run: python -m sandbox.repro gather-uneven
    broken: CRASH [collective_mismatch]: 4 ranks in 1.66 s
      Collective mismatch at call #1 of group [0, 1, 2, 3]: rank 0 calls all_gather(shape [2], float32) at
      sandbox/bugs/gather_uneven.py:59; rank 1 calls all_gather(shape [3], float32) at
      sandbox/bugs/gather_uneven.py:59; rank 2 calls all_gather(shape [4], float32) at
      sandbox/bugs/gather_uneven.py:59; rank 3 calls all_gather(shape [5], float32) at
      sandbox/bugs/gather_uneven.py:59. The shape must be the same on every rank of the group. Its peers saw:
      rank 1 then lost its connection (Read error [127.0.0.1]:9406: Connection reset by peer), a consequence;
      rank 2 then lost its connection (Connection closed by peer [127.0.0.1]:61581), a consequence.
      expected: hang or crash, collective_mismatch -> as documented
    fixed: OK: 4 ranks in 1.33 s
      expected: ok, = single-process reference -> as documented
"""
import torch
import torch.distributed as dist

from sandbox.bugs import Bug, Expect, Gpu, init

BUG = Bug(
    slug="gather-uneven", title="all_gather with a different length on every rank",
    source="primitive pitfall: gloo's all_gather wants equal sizes (torch/distributed/distributed_c10d.py, all_gather)",
    symptom="the all_gather hangs or aborts with a size mismatch",
    world_size=4, min_world_size=2, needs="cpu",
    broken=Expect(("hang", "crash"), "collective_mismatch", note="shapes differ at the same call"),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect("hang", "collective_mismatch"), fixed=Expect("ok", matches_reference=True)))


def items(rank, device="cpu"):
    return torch.arange(rank + 2, dtype=torch.float32, device=device) + 10 * rank  # rank r holds r + 2 items


def broken():
    device = init()  # gloo on CPU; NCCL with --gpu
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = items(rank, device)
    out = [torch.empty_like(mine) for _ in range(world)]  # BUG: assumes every rank has as many as this one
    dist.all_gather(out, mine)
    got = [t.tolist() for t in out]
    dist.destroy_process_group()
    return got


def fixed():
    device = init()
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = items(rank, device)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([len(mine)], device=device))  # FIX: first agree on the sizes
    longest = max(int(s) for s in sizes)
    padded = torch.zeros(longest, device=device)
    padded[:len(mine)] = mine
    out = [torch.empty(longest, device=device) for _ in range(world)]
    dist.all_gather(out, padded)
    dist.destroy_process_group()
    return [t[:int(n)].tolist() for t, n in zip(out, sizes)]


def reference(world_size):
    return [items(r).tolist() for r in range(world_size)]
