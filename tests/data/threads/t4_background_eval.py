# Background evaluator: a threading.Thread subclass runs validation when the
# training loop requests it, so the GPUs keep training while eval runs.
import datetime
import threading
import time

import torch
import torch.distributed as dist


class AsyncEvaluator(threading.Thread):
    def __init__(self, model):
        super().__init__(name="async-eval", daemon=True)
        self.model, self.requested, self.results = model, threading.Event(), []

    def run(self):
        while self.requested.wait():
            self.requested.clear()
            correct = total = 0
            with torch.no_grad():
                for _ in range(3):  # validation batches
                    time.sleep(0.05)
                    x, y = torch.randn(16, 10), torch.randint(0, 3, (16,))
                    correct += (self.model(x).argmax(1) == y).sum().item()
                    total += 16
            stats = torch.tensor([correct, total], dtype=torch.float32)
            dist.all_reduce(stats)  # global accuracy
            self.results.append((stats[0] / stats[1]).item())


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    evaluator = AsyncEvaluator(model)
    evaluator.start()
    micro_batches = 6 if rank % 2 else 1  # odd ranks got long sequences: more micro-batches
    for step in range(1, 7):
        opt.zero_grad()
        for _ in range(micro_batches):
            time.sleep(0.05)  # forward/backward of one packed micro-batch
            x, y = torch.randn(16, 10), torch.randint(0, 3, (16,))
            (torch.nn.functional.cross_entropy(model(x), y) / micro_batches).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        if step % 3 == 0:
            evaluator.requested.set()
    if rank == 0:
        print("val acc", evaluator.results)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
