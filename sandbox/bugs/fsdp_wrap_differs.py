"""fsdp-wrap-differs: FSDP2's `fully_shard` applied by a size policy whose threshold is read per rank, so the
ranks shard different blocks and their all_gathers disagree.

Source: FSDP's contract (torch/distributed/fsdp/_fully_shard/_fully_shard.py, `fully_shard`): every rank must
apply `fully_shard` to the same modules, in the same order, because each call makes one parameter group whose
shards are all-gathered before its forward and reduce-scattered after its backward, as one flat buffer. The size
policy is FSDP1's `size_based_auto_wrap_policy(min_num_params=...)` (torch/distributed/fsdp/wrap.py) written by
hand for FSDP2; here its threshold comes from each node's own copy of a settings file, and node 1's is stale.

Symptom: the first forward never returns, or a rank dies with SIGABRT:
`gloo::EnforceNotMet ... Received data size doesn't match expected size. Is there a distributed collective
mismatch in your code?`; the other rank then reports `Connection reset by peer` (or `Connection closed by peer`).

Root cause: rank 0 reads min_params=100 and shards blocks 0, 1 and 2 (144, 272 and 136 parameters) on their own;
rank 1 reads min_params=200 and shards block 1 only. The root `fully_shard(model)` takes whatever is left: on
rank 0 block 3 alone (9 parameters), on rank 1 blocks 0, 2 and 3. So the root's all_gather, the first collective
of the forward, moves a flat buffer of this rank's shards of 9 elements on rank 0 and 149 on rank 1, and the
number of all_gathers and reduce_scatters per step differs too (4 groups against 2).

Fix: a policy that depends on the model alone: the same threshold (a constant of the code, or one agreed by a
collective before wrapping) on every rank, so every rank makes the same parameter groups. Checkpoints, the
optimizer's state and the wrapping must all see the same module tree.

On GPUs (NCCL): no size error. NCCL checks no sizes: each rank's all_gather kernel reads or waits for bytes its
peer never sends; the usual outcome is a silent hang in the GPU stream until the watchdog's timeout (`Watchdog
caught collective operation timeout: WorkNCCL(SeqNum=..., OpType=_ALLGATHER_BASE, ...)`), or, when the sizes
happen to make the transfers line up, garbage in the parameters. The sandbox names it from the calls still in
flight: the same collective mismatch, the same shapes.

Run: python -m sandbox.repro fsdp-wrap-differs
    broken: CRASH [collective_mismatch]: 2 ranks in 11.65 s
      Collective mismatch at call #1 of group [0, 1]: rank 0 calls all_gather_single(shape [9], float32) at
      sandbox/bugs/fsdp_wrap_differs.py:97; rank 1 calls all_gather_single(shape [149], float32) at
      sandbox/bugs/fsdp_wrap_differs.py:97. The shape must be the same on every rank of the group. This call
      is FSDP's, its all_gather of one fully_shard group's parameters before that group's forward (or the
      backward's re-gather): a flat buffer of this rank's shard of every parameter in the group. Its size
      differs from rank to rank because the ranks put different parameters in the group: they applied
      fully_shard to different modules, so their groups, and the number of all_gathers and reduce_scatters in
      each step, differ. Every rank must call fully_shard on the same modules, in the same order, so that
      every rank makes the same parameter groups: a wrapping policy must depend on the model alone (no per-
      rank setting, threshold read per rank, or free-memory reading).
      expected: hang or crash, collective_mismatch, culprits [1], error /Received data size doesn't match expected size|collective_mismatch|Collective mismatch/ -> as documented
    fixed: OK: 2 ranks in 9.49 s
      expected: ok, = single-process reference -> as documented
"""
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from sandbox.bugs import Bug, Expect, Gpu, init

BUG = Bug(
    slug="fsdp-wrap-differs", title="FSDP2 wrapping policy that differs from rank to rank",
    source="FSDP's contract: every rank must fully_shard the same modules (torch/distributed/fsdp, fully_shard)",
    symptom="the first forward hangs or aborts with a size mismatch in FSDP's all_gather",
    world_size=2, min_world_size=2, needs="cpu",
    broken=Expect(("hang", "crash"), "collective_mismatch", [1],
                  error=r"Received data size doesn't match expected size|collective_mismatch|Collective mismatch",
                  note="rank 1 shards other blocks: the root's all_gather has another shape"),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect(("hang", "crash"), "collective_mismatch", [1]),
            fixed=Expect("ok", matches_reference=True)))

STEPS, BATCH, LR = 2, 4, 0.1
MIN_PARAMS = 100  # FIX: the policy's threshold, a constant of the code: the same on every rank
# each node's own copy of the training settings file; node 1's copy is older (the threshold was lowered since)
NODE_SETTINGS = {1: {"fsdp_min_params": 200}}
DEFAULT_SETTINGS = {"fsdp_min_params": 100}


def make_model():
    torch.manual_seed(0)  # the same initial weights on every rank, as FSDP assumes
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 8),
                               torch.nn.Linear(8, 1))  # 144, 272, 136 and 9 parameters


def batch(step, rank, device="cpu"):
    g = torch.Generator().manual_seed(1000 * step + rank)  # each rank its own shard of the step's data
    x = torch.randn(BATCH, 8, generator=g)
    return x.to(device), x.sum(dim=1, keepdim=True).to(device)


def shard_big_blocks(model, min_params):
    """The wrapping policy: every block with more than `min_params` parameters gets its own FSDP group; the root
    call takes the rest (FSDP1's size_based_auto_wrap_policy, by hand)."""
    for block in model:
        if sum(p.numel() for p in block.parameters()) > min_params:
            fully_shard(block)
    fully_shard(model)


def train(model, device):
    rank = dist.get_rank()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        x, y = batch(step, rank, device)
        loss = torch.nn.functional.mse_loss(model(x), y)  # FSDP all_gathers each group's shards here
        opt.zero_grad()
        loss.backward()  # and reduce_scatters each group's gradients here
        opt.step()
    return {name: p.full_tensor().flatten().tolist() for name, p in model.named_parameters()}


def broken():
    device = init()  # gloo on CPU; NCCL with --gpu
    model = make_model().to(device)
    settings = NODE_SETTINGS.get(dist.get_rank(), DEFAULT_SETTINGS)  # what this node's settings file says
    min_params = settings["fsdp_min_params"]  # BUG: a per-rank setting decides the wrapping
    shard_big_blocks(model, min_params)
    out = train(model, device)
    dist.destroy_process_group()
    return out


def fixed():
    device = init()
    model = make_model().to(device)
    shard_big_blocks(model, MIN_PARAMS)  # FIX: a policy that depends on the model only: the same groups everywhere
    out = train(model, device)
    dist.destroy_process_group()
    return out


def reference(world_size):
    """The same model trained in one process on every rank's data at once: FSDP averages the ranks' gradients,
    which for equal batches is the gradient of the mean loss over the whole batch."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        xs, ys = zip(*(batch(step, r) for r in range(world_size)))
        loss = torch.nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {name: p.detach().flatten().tolist() for name, p in model.named_parameters()}
