"""init-port: the worker init path hard-codes `tcp://localhost:29500`, the launcher set MASTER_PORT.

Source: a real report of an inference engine's worker start-up. `init_process_group`'s `init_method`
(torch/distributed/distributed_c10d.py) is "env://" by default, which reads MASTER_ADDR and MASTER_PORT; a
"tcp://host:port" string names its own endpoint instead.

Symptom: only the driver worker gets through its part of init; the other workers hang in init_process_group,
silently, until the 30-minute default timeout.

Root cause: the launcher hands every worker a rendezvous endpoint (`MASTER_ADDR:MASTER_PORT`, i.e. `env://`),
but the code path that starts the non-driver workers builds its own `tcp://localhost:29500`. Two endpoints, two
stores: the driver waits for peers that are knocking on another door.

Fix: pass the launcher's `distributed_init_method` (`env://`) to every worker, never a literal port.

On GPUs (NCCL): the same. The rendezvous (the TCP store of `init_method`) comes before any backend, so rank 0
waits at one endpoint and the others at another whatever the backend.

Run: python -m sandbox.repro init-port
    broken: HANG [init_mismatch]: 4 ranks in 2.28 s
      The ranks disagree on the rendezvous, so they can never meet: rank 0 at 127.0.0.1:60085 (world size 4,
      env://); ranks 1-3 at 127.0.0.1:47327 (world size 4, tcp://localhost:47327). The launcher's endpoint is
      127.0.0.1:60085 (MASTER_ADDR:MASTER_PORT); ranks 1-3 use another (tcp://localhost:47327 at
      sandbox/bugs/init_port.py:60).
      expected: hang, init_mismatch, culprits others -> as documented
    fixed: OK: 4 ranks in 1.29 s
      expected: ok, = single-process reference -> as documented
(The reported code hard-coded port 29500; the sandbox uses a free stand-in port so it never depends on 29500 being
free.)
"""
import os
import socket

import torch
import torch.distributed as dist

from sandbox.bugs import Bug, Expect, Gpu, init

BUG = Bug(
    slug="init-port", title="A hard-coded rendezvous port on one init path",
    source="worker start-up of an inference engine (a real report)",
    symptom="only worker 0 gets through init; the others hang in init_process_group",
    world_size=4, min_world_size=2, needs="cpu",
    broken=Expect("hang", "init_mismatch", "others", note="ranks 1.. knock on the hard-coded port"),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect("hang", "init_mismatch", "others"), fixed=Expect("ok", matches_reference=True)))

HARD_CODED = 29500  # what the reported code hard-codes


def options(world_size, gpu):
    with socket.socket() as s:  # a free stand-in for 29500
        s.bind(("127.0.0.1", 0))
        return {"stand_in_port": s.getsockname()[1]}


def init_worker(distributed_init_method):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    print(f"worker {rank}: init_process_group({distributed_init_method!r})")
    device = init(init_method=distributed_init_method, rank=rank, world_size=world)  # gloo; NCCL with --gpu
    t = torch.tensor([float(rank)], device=device)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return t.item()


def broken(stand_in_port):
    rank = int(os.environ["RANK"])
    if rank == 0:
        return init_worker("env://")  # the driver worker gets the launcher's method
    print(f"worker {rank}: the reported tcp://localhost:{HARD_CODED} is played by port {stand_in_port}")
    return init_worker(f"tcp://localhost:{stand_in_port}")  # BUG: a literal endpoint, not the launcher's


def fixed(stand_in_port):
    return init_worker("env://")  # FIX: every worker uses the launcher's distributed_init_method


def reference(world_size, stand_in_port):
    return float(sum(range(world_size)))
