"""node-failure: a node dies mid-training, the job was started without restarts and saves nothing to resume from.

Source: any multi-node training job, and torchrun's own account of fault tolerance (its `--max-restarts` and the
checkpoint a restarted worker must load: https://pytorch.org/docs/stable/elastic/run.html, "Fault tolerance", and
the elastic training tutorial's "save a snapshot, load it at start" pattern). A machine of a cluster fails: a
kernel panic, a lost power supply, a preempted spot instance, the OOM killer taking every process on it.

Symptom: the ranks on the other nodes fail in their next collective with gloo's `Connection closed by peer` (NCCL:
a watchdog timeout or a remote error), torchrun reports the workers failed, and the job ends: every step trained so
far is lost, and the next run starts from step 0.

Root cause: nothing in the job survives a node: torchrun was not allowed to restart the workers
(`--max-restarts 0`, its default), and the training loop keeps its state only in the workers' memory.

Fix: both halves of torchrun's fault tolerance. Start the job with `--max-restarts N`: when a worker fails,
torchrun stops the others, waits for the node to come back (or, with `--nnodes MIN:MAX`, goes on with fewer), and
starts every worker again with `TORCHELASTIC_RESTART_COUNT` one higher. And make a restart worth it: save the
training state every few steps (rank 0 writes it, whole, with an atomic rename) where every node can read it, and
load it at start, resuming after the last saved step. The fixed variant does both; the sandbox's node comes back
with a fresh torchrun agent, as a cluster scheduler would restart it.

On GPUs (NCCL): not run here: simulated nodes run CPU ranks. On a real cluster the failure reaches the other nodes
as an NCCL error or a watchdog timeout instead of a closed connection; the fix is the same.

Simulated on 2 nodes: each node is a Linux network namespace with its own hostname (node0, node1), address and
loopback, joined by a private bridge (sandbox/nodes.py; needs root), with the real torchrun agent on each
(`--rdzv-backend c10d`, the rendezvous at node0:29400). The failure comes from outside, as a power cut would: SIGKILL
to every process in node1's namespace, its agent and its workers, once rank 2 has entered its 8th traced call. A fresh
agent then starts there, as a cluster's scheduler brings a machine back.

Run: python -m sandbox.repro node-failure
    broken: CRASH [node_failure]: 4 ranks in 12.10 s
      Node1 died: killed when rank 2 (node1) entered its call 8, taking ranks 2 and 3 (node1) with it, and the
      job could not go on without them; ranks 0 and 1 (node0) then failed or were ended, a consequence. With
      --max-restarts 0 torchrun does not restart the workers: the work since the last checkpoint is lost. The
      torchrun agent on node1 was still running 5 s after the one on node0 ended; the sandbox ended it.
      expected: crash or error, node_failure, culprits [2, 3] -> as documented
    fixed: OK: 4 ranks in 19.01 s
      expected: ok, = single-process reference -> as documented
"""
import os
import time

import torch
import torch.distributed as dist

from sandbox.bugs import Bug, Expect, init

BUG = Bug(
    slug="node-failure", title="A node dies mid-training, with no restarts and nothing saved",
    source="every multi-node training job; torchrun's fault tolerance (--max-restarts, resuming from a checkpoint)",
    symptom="the other nodes lose their connections and the job ends; every step trained so far is lost",
    world_size=4, min_world_size=4, needs="cpu", nnodes=2, timeout=120.0,
    broken=Expect(("crash", "error"), "node_failure", [2, 3], note="node1 is killed at rank 2's 8th call"),
    fixed=Expect("ok", output=r"resumed after step \d+", matches_reference=True,
                 note="torchrun restarts the workers; they resume from the checkpoint"))

STEPS = 20
LR = 0.1
KILL = "1@rank2:8"  # node1, when rank 2 enters its 8th traced call (init_process_group is its first)


def launcher(variant: str) -> dict:
    """How each variant is started: under torchrun's agents, node1 killed mid-training; only the fixed variant may
    be restarted."""
    return {"launcher": "torchrun", "kill_node": KILL, "max_restarts": 2 if variant == "fixed" else 0}


def step(w: torch.Tensor) -> torch.Tensor:
    """One training step: every rank's gradient (its rank + 1, times w), summed over all ranks, then SGD."""
    grad = w * float(dist.get_rank() + 1)
    dist.all_reduce(grad)
    time.sleep(0.05)  # the rest of a step (forward, backward), so the kill lands mid-training
    return w - LR * grad / dist.get_world_size()


def broken():
    init()
    w = torch.ones(4)
    for _ in range(STEPS):
        w = step(w)  # BUG: the state lives only in memory, and torchrun may not restart the workers
    dist.destroy_process_group()
    return w.tolist()


def fixed():
    init()
    path = os.path.join(os.environ["SANDBOX_RUN_DIR"], "node-failure.pt")  # a folder every node reads
    w, start = torch.ones(4), 0
    if os.path.exists(path):  # FIX: a restarted worker resumes from the last saved step
        saved = torch.load(path)
        w, start = saved["w"], saved["step"] + 1
        print(f"resumed after step {saved['step']} (restart {os.environ.get('TORCHELASTIC_RESTART_COUNT')})")
    for i in range(start, STEPS):
        w = step(w)
        if dist.get_rank() == 0:  # FIX: save the state after every step, whole or not at all
            torch.save({"step": i, "w": w}, path + ".tmp")
            os.replace(path + ".tmp", path)
    dist.destroy_process_group()
    return w.tolist()


def reference(world_size):
    w = torch.ones(4)
    for _ in range(STEPS):
        w = w - LR * w * sum(r + 1 for r in range(world_size)) / world_size
    return w.tolist()
