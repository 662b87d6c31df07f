"""Token classifier training with a metrics logger on the main process.

Only the main process owns a MetricsLogger (it would write to the experiment
tracker); the other ranks get a NullLogger with the same interface so the
training loop does not need to care which rank it runs on.
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn


class NullLogger:
    def log_metrics(self, step, loss):
        pass


class MetricsLogger:
    def __init__(self, log_every=2):
        self.log_every = log_every
        self.history = []

    def log_metrics(self, step, loss):
        if step % self.log_every:
            return
        global_loss = torch.tensor([loss])
        dist.all_reduce(global_loss)
        global_loss /= dist.get_world_size()
        self.history.append((step, global_loss.item()))
        print(f"[metrics] step={step} loss={global_loss.item():.4f}")


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 8), nn.Flatten(), nn.Linear(32, 5))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    logger = MetricsLogger() if rank == 0 else NullLogger()
    gen = torch.Generator().manual_seed(rank)
    for step in range(6):
        tokens = torch.randint(0, 50, (4, 4), generator=gen)
        labels = tokens[:, 0] % 5
        loss = nn.functional.cross_entropy(model(tokens), labels)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad.div_(world)
        opt.step()
        logger.log_metrics(step, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
