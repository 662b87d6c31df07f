"""Small Trainer with a callback system, in the style of Lightning.

Trains a linear regression model with manual gradient averaging across ranks.
Callbacks get on_train_batch_end(trainer, step, loss); the ThroughputMonitor
reports the global number of samples per second.
"""
import datetime
import time

import torch
import torch.distributed as dist


class Callback:
    def on_train_batch_end(self, trainer, step, loss):
        pass


class ThroughputMonitor(Callback):
    def __init__(self):
        self.t0 = time.time()

    def on_train_batch_end(self, trainer, step, loss):
        samples = torch.tensor([float(trainer.batch_size)])
        dist.all_reduce(samples)  # total samples across ranks
        rate = samples.item() / max(time.time() - self.t0, 1e-6)
        print(f"step {step}: {rate:.1f} samples/s, loss {loss:.4f}")
        self.t0 = time.time()


class Trainer:
    def __init__(self, model, callbacks, batch_size=8):
        self.model, self.callbacks, self.batch_size = model, callbacks, batch_size
        self.opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def fit(self, steps):
        for step in range(steps):
            x = torch.randn(self.batch_size, 16)
            loss = (self.model(x) - x.sum(1, keepdim=True)).pow(2).mean()
            self.opt.zero_grad()
            loss.backward()
            for p in self.model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()
            self.opt.step()
            for cb in self.callbacks:
                cb.on_train_batch_end(self, step, loss.item())


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    callbacks = []
    if rank == 0:
        callbacks.append(ThroughputMonitor())
    Trainer(model, callbacks).fit(steps=5)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
