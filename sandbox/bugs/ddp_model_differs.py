"""ddp-model-differs: every rank builds its vocabulary from its own shard of the corpus, so the embedding DDP wraps
has another number of rows on one rank.

Source: a pitfall of DistributedDataParallel's constructor (torch/nn/parallel/distributed.py, `__init__` calls
`_verify_param_shape_across_processes`, torch/csrc/distributed/c10d/reducer.cpp
`verify_params_across_processes`), met whenever a model's size comes from something each rank reads or computes
for itself: a config file per node, an environment variable, a vocabulary or label set counted from the rank's
own data. The example from our own files: examples/framework/ddp_wider.py.

Symptom: the job stops before the first step, at `DistributedDataParallel(...)`, with
`RuntimeError: [3]: params[0] in this process with sizes [9, 8] appears not to match sizes of the same param in
process 0.` on the rank that differs, and "Connection closed by peer" on the others.

Root cause: each rank tokenizes its own shard (sentences r, r + world, ...) and builds the vocabulary from the
words it saw, so the embedding has 6 rows on ranks 0-2 and 9 on rank 3. DDP's constructor gathers every
parameter's shape from rank 0 and stops a rank whose shapes differ; the others then lose their peer in DDP's next
broadcast. Worse is what it cannot see: ranks 0-2 have 6 words each, but not the same 6 (id 1 is "cast" on rank
0, "bad" on rank 1), so had rank 3 seen 6 words too, DDP would have trained one embedding row on different words
on different ranks, with no error at all.

Fix: agree on the vocabulary before building the model. Here every rank brings the words of its shard
(`all_gather_object`) and builds the vocabulary from their union, sorted: the same list, the same ids, on every
rank. Where one rank can read the whole corpus, build it there and send it with `broadcast_object_list`; or build
it once, offline, and give every rank the same file (a saved tokenizer). Agreeing on the size only (an all_reduce
MAX of len(vocab)) makes DDP's check pass and the model wrong: the ids still mean other words on other ranks.

On GPUs (NCCL): the same error, on the same rank: the shapes are gathered over the NCCL group (as CUDA tensors)
and compared on the CPU, so rank 3 raises as on gloo. The other ranks go on into DDP's broadcast of the module's
state, which NCCL queues on the GPU: they wait there for rank 3, which is gone, until the process group's
timeout (gloo tells them at once that the connection closed).

Run: python -m sandbox.repro ddp-model-differs
    broken: ERROR [model_differs]: 4 ranks in 9.70 s
      The ranks built different models: at DistributedDataParallel(...)
      (sandbox/bugs/ddp_model_differs.py:111) parameter embed.weight differs: rank 3 has [9, 8]; ranks 0-2
      have [6, 8]. DDP's constructor checks every parameter's shape across ranks and stops. Build the same
      model on every rank: agree on what sets its sizes before building it (read the config once, on rank 0,
      and broadcast it with broadcast_object_list; compute a vocabulary or label set from the whole dataset,
      or gather every rank's part, not from this rank's shard; or give every rank the same file). Its peers
      saw: rank 0 then lost its connection (Connection closed by peer [127.0.0.1]:5317), a consequence; rank 1
      then lost its connection (Connection closed by peer [127.0.0.1]:28057), a consequence; rank 2 then lost
      its connection (Connection closed by peer [127.0.0.1]:22725), a consequence.
      expected: error, model_differs, culprits [3], error /appears not to match sizes of the same param in process 0|parameter embed.weight differs: rank 3 has .9, 8./ -> as documented
    fixed: OK: 4 ranks in 9.57 s
      expected: ok, = single-process reference -> as documented
"""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from sandbox.bugs import Bug, Expect, Gpu, init

BUG = Bug(
    slug="ddp-model-differs", title="DDP over a model whose size each rank computed from its own data",
    source="DistributedDataParallel's constructor check (torch/nn/parallel/distributed.py); a vocabulary per shard",
    symptom="RuntimeError: params[0] in this process with sizes [9, 8] appears not to match sizes of the same param"
            " in process 0",
    world_size=4, min_world_size=2, needs="cpu",
    broken=Expect("error", "model_differs", [3],
                  error=r"appears not to match sizes of the same param in process 0|parameter embed.weight"
                        r" differs: rank 3 has .9, 8."),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect(("error", "hang", "crash"), "model_differs",  # on 2 GPUs neither rank is the odd one
                          error=r"appears not to match sizes of the same param in process 0"),
            fixed=Expect("ok", matches_reference=True)))

# (sentence, label): a tiny sentiment corpus. Rank r reads sentences r, r + world, ... (its shard).
CORPUS = [
    ("the film was good", 1), ("the film was bad", 0), ("the plot was good", 1), ("a dull plot and a bad cast", 0),
    ("a good cast", 1), ("a bad cast", 0), ("a good film", 1), ("the ending was dull", 0),
]
DIM, STEPS, LR = 8, 3, 0.5


def shard(rank, world):
    return CORPUS[rank::world]


def words_of(sentences):
    return {w for text, _ in sentences for w in text.split()}


class Classifier(torch.nn.Module):
    """Mean of the sentence's word embeddings, then a linear layer: its first parameter has one row per word."""

    def __init__(self, vocab_size):
        super().__init__()
        torch.manual_seed(0)  # the same initial weights wherever the sizes agree
        self.embed = torch.nn.EmbeddingBag(vocab_size, DIM, mode="mean")
        self.head = torch.nn.Linear(DIM, 2)

    def forward(self, ids, offsets):
        return self.head(self.embed(ids, offsets))


def encode(sentences, vocab, device="cpu"):
    """The sentences as EmbeddingBag's flat ids and offsets, with their labels."""
    index = {w: i for i, w in enumerate(vocab)}
    ids, offsets = [], []
    for text, _ in sentences:
        offsets.append(len(ids))
        ids += [index[w] for w in text.split()]
    labels = [label for _, label in sentences]
    return (torch.tensor(ids, device=device), torch.tensor(offsets, device=device),
            torch.tensor(labels, device=device))


def train(vocab, mine, device):
    """DDP over the classifier for this rank's shard, STEPS full-batch steps; the final weights by word."""
    model = Classifier(len(vocab)).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    ids, offsets, labels = encode(mine, vocab, device)
    for _ in range(STEPS):
        loss = torch.nn.functional.cross_entropy(ddp(ids, offsets), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {"vocab": vocab, "embedding": model.embed.weight.detach().cpu().tolist(),
            "head": model.head.weight.detach().cpu().tolist()}


def broken():
    device = init()  # gloo on CPU; NCCL with --gpu
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = shard(rank, world)
    vocab = sorted(words_of(mine))  # BUG: built from this rank's shard only: its size (and its ids) differ by rank
    out = train(vocab, mine, device)
    dist.destroy_process_group()
    return out


def fixed():
    device = init()
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = shard(rank, world)
    seen = [None] * world
    dist.all_gather_object(seen, sorted(words_of(mine)))  # FIX: every rank's words, on every rank
    vocab = sorted(set().union(*seen))  # FIX: one vocabulary, the same ids everywhere
    out = train(vocab, mine, device)
    dist.destroy_process_group()
    return out


def reference(world_size):
    """The same training in one process: the corpus's vocabulary, each step's gradient the mean of the shards'."""
    vocab = sorted(words_of(CORPUS))
    model = Classifier(len(vocab))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    data = [encode(shard(r, world_size), vocab) for r in range(world_size)]
    for _ in range(STEPS):
        opt.zero_grad()
        for ids, offsets, labels in data:  # DDP averages the ranks' gradients: sum of each loss / world
            (torch.nn.functional.cross_entropy(model(ids, offsets), labels) / world_size).backward()
        opt.step()
    return {"vocab": vocab, "embedding": model.embed.weight.detach().tolist(),
            "head": model.head.weight.detach().tolist()}
