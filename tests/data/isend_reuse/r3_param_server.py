"""Asynchronous parameter server with sequential updates.

Rank 0 is the server, the other ranks are workers.  Each worker pushes a
gradient; the server applies the gradients one worker at a time (in rank
order) and hands every worker the parameters right after its own update,
together with a small header (version, checksum) so the worker can verify the
snapshot it trains on next.  Workers then evaluate on their local shard and
pick up the new parameters.
"""
import datetime
import time

import torch
import torch.distributed as dist

DIM, LR = 4096, 0.1


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()

    if rank == 0:
        params = torch.linspace(-1.0, 1.0, DIM)
        grad = torch.empty(DIM)
        reqs = []
        for version, worker in enumerate(range(1, world), start=1):
            dist.recv(grad, src=worker)
            params.add_(grad, alpha=-LR)
            header = torch.tensor([float(version), params.sum().item()], dtype=torch.float64)
            reqs.append(dist.isend(params, dst=worker))
            reqs.append(dist.isend(header, dst=worker))
        for req in reqs:
            req.wait()
    else:
        grad = torch.full((DIM,), float(rank))
        dist.send(grad, dst=0)
        time.sleep(0.5 / rank)   # local evaluation; shard sizes differ per worker
        params, header = torch.empty(DIM), torch.empty(2, dtype=torch.float64)
        dist.recv(params, src=0)
        dist.recv(header, src=0)
        version, checksum = int(header[0].item()), header[1].item()
        if abs(params.sum().item() - checksum) > 1e-2:
            print(f"WRONG: worker {rank} got parameter snapshot v{version} with checksum "
                  f"{params.sum().item():.3f}, server sent {checksum:.3f}", flush=True)
            raise SystemExit(1)
        print(f"worker {rank}: snapshot v{version} ok", flush=True)

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
