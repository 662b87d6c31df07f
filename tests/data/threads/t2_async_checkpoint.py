# torchtitan/DeepSpeed-style async checkpointing: the save runs on a
# ThreadPoolExecutor so the training loop does not stall on disk I/O.
import datetime
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
import time

import torch
import torch.distributed as dist

CKPT_DIR = tempfile.mkdtemp(prefix="ckpt_")


def save_checkpoint(step, state, rank, world):
    time.sleep(0.15)  # serialize the state dict
    numel = sum(v.numel() for v in state.values())
    meta = torch.tensor([rank, numel], dtype=torch.int64)
    gathered = [torch.zeros(2, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(gathered, meta)  # collect shard sizes for the index file
    torch.save(state, os.path.join(CKPT_DIR, f"step{step}_rank{rank}.pt"))
    return [g.tolist() for g in gathered]


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 128), torch.nn.Tanh(), torch.nn.Linear(128, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    saver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="async-ckpt")
    pending = None
    load_time = 0.4 if rank == 2 else 0.02  # rank 2 sits on a slow NFS mount
    for step in range(1, 7):
        time.sleep(load_time)
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        if step % 2 == 0:
            state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            pending = saver.submit(save_checkpoint, step, state, rank, world)
    if pending is not None:
        print(f"rank {rank} index", pending.result())
    saver.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
