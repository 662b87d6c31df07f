# Accelerate-style script with a heartbeat: after each optimizer step a
# threading.Timer fires a liveness check so a stalled node shows up in the logs.
import datetime
import threading
import time

import torch
import torch.distributed as dist


def heartbeat(step, rank):
    dist.barrier()  # every rank still alive?
    if rank == 0:
        print(f"[heartbeat] step {step}: all ranks alive", flush=True)


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 40), torch.nn.GELU(), torch.nn.Linear(40, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    load_time = 0.5 if rank == world - 1 else 0.05  # last rank decodes images on one core
    for step in range(8):
        time.sleep(load_time)
        x, y = torch.randn(32, 20), torch.randint(0, 2, (32,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        dist.all_reduce(grads)
        grads /= world
        i = 0
        for p in model.parameters():
            p.grad.copy_(grads[i:i + p.numel()].view_as(p))
            i += p.numel()
        opt.step()
        hb = threading.Timer(0.2, heartbeat, args=(step, rank))
        hb.daemon = True
        hb.start()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
