# Lightning-style training loop with a background metrics-logger thread.
# The logger averages the loss across ranks before pushing it to the dashboard.
import datetime
import queue
import threading
import time

import torch
import torch.distributed as dist


def metrics_worker(q, history, group):
    while True:
        item = q.get()
        if item is None:
            return
        step, loss = item
        time.sleep(0.15)  # format the record, push to the dashboard
        t = torch.tensor([loss])
        dist.all_reduce(t, group=group)  # average the loss over ranks
        history.append((step, t.item() / dist.get_world_size()))


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    q, history = queue.Queue(), []
    log_group = dist.new_group(backend="gloo")  # the logger's own communicator
    logger = threading.Thread(target=metrics_worker, args=(q, history, log_group), name="metrics-logger", daemon=True)
    logger.start()
    load_time = 0.05 if rank == 0 else 0.3  # rank 1 reads from a slower shard
    for step in range(6):
        time.sleep(load_time)  # data loading
        x, y = torch.randn(16, 32), torch.randn(16, 1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        flat = torch.cat([p.grad.flatten() for p in model.parameters()])
        dist.all_reduce(flat)  # gradient sync (DDP bucket)
        flat /= world
        offset = 0
        for p in model.parameters():
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        opt.step()
        q.put((step, loss.item()))
    q.put(None)
    logger.join()
    if rank == 0:
        print("final loss", history[-1])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
