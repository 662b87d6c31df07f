"""Multi-task text classifier: one shared encoder, one head per task.

The training set is the concatenation of three task datasets (sentiment,
topic, toxicity); every batch mixes tasks and each head only sees the
samples of its own task. DistributedSampler shards the shuffled dataset
across workers.  torchrun --nproc-per-node 3 s3_multitask_heads.py
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

TASKS = {"sentiment": (120, 3), "topic": (90, 8), "toxicity": (30, 2)}  # task: (n_samples, n_classes)
SEED = 16


def make_dataset(dim=20):
    g = torch.Generator().manual_seed(1)
    xs, task_ids, labels = [], [], []
    for t, (n, n_classes) in enumerate(TASKS.values()):
        xs.append(torch.randn(n, dim, generator=g))
        task_ids.append(torch.full((n,), t))
        labels.append(torch.randint(0, n_classes, (n,), generator=g))
    return TensorDataset(torch.cat(xs), torch.cat(task_ids), torch.cat(labels))


class MultiTaskModel(nn.Module):
    def __init__(self, dim=20, hidden=64):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.heads = nn.ModuleDict({name: nn.Linear(hidden, c) for name, (_, c) in TASKS.items()})

    def forward(self, x, task_ids, labels):
        h = self.encoder(x)
        loss = h.new_zeros(())
        for t, (name, head) in enumerate(self.heads.items()):
            mask = task_ids == t
            if not mask.any():
                continue
            loss = loss + F.cross_entropy(head(h[mask]), labels[mask]) * mask.float().mean()
        return loss


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(MultiTaskModel())
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sampler = DistributedSampler(make_dataset(), shuffle=True, seed=SEED)
    loader = DataLoader(sampler.dataset, batch_size=8, sampler=sampler)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for step, (x, task_ids, labels) in enumerate(loader):
            loss = model(x, task_ids, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if rank == 0 and step % 5 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
