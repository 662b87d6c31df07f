"""Bucketed gradient averaging for a small transformer-style block.

Parameters are spread over a fixed number of communication buckets by name so
that each bucket is reduced with one flat all_reduce instead of one call per
tensor. The assignment is computed once at start-up from the parameter names.
"""
import datetime
import zlib

import torch
import torch.distributed as dist
import torch.nn as nn

NUM_BUCKETS = 4


class Block(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1)
        x = x + self.proj(att @ v)
        return x + self.down(torch.relu(self.up(x)))


def assign_buckets(model):
    buckets = [[] for _ in range(NUM_BUCKETS)]
    for name, p in model.named_parameters():
        buckets[zlib.crc32(name.encode()) % NUM_BUCKETS].append(p)
    return buckets


def allreduce_buckets(buckets, world):
    for params in buckets:
        if not params:
            continue
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat)
        flat /= world
        torch.nn.utils.vector_to_parameters(flat, [p.grad for p in params])


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = Block()
    buckets = assign_buckets(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.manual_seed(rank)
    for step in range(4):
        x = torch.randn(2, 8, 16)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        allreduce_buckets(buckets, world)
        opt.step()
    print(f"rank {rank} done, loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
