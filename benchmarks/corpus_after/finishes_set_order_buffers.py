# case: finishes_set_order_buffers
# class: finishes
# names: model_differs
# world: 3
# culprits: 1,2
# cause: self.register_buffer, line 35
# nccl: yes
"""A rotary-embedding module registers one inv_freq buffer per attention type, iterating list(set(layer_types)).
Set order of strings follows each process's own hash seed, so ranks register the same-shaped buffers in different
orders. DDP's start-up broadcast copies rank 0's buffers by position, not by name, so on every rank whose order
differs from rank 0's the sliding and full RoPE tables are silently swapped; the run ends normally but those ranks
compute with the wrong tables (the script prints WRONG for them). Ranks 1 and 2 are wrong in a run where their set
order differs from rank 0's (almost always with three attention types).
From: https://github.com/huggingface/transformers/pull/48162
"""
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "chunked_attention"]
BASE = {"sliding_attention": 10_000.0, "full_attention": 1_000_000.0, "chunked_attention": 500_000.0}


def inv_freq(base, dim=16):
    return 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))


class Rotary(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        for kind in list(set(LAYER_TYPES)):
            self.register_buffer(f"{kind}_inv_freq", inv_freq(BASE[kind]), persistent=False)


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Rotary())
    names = [n for n, _ in model.module.named_buffers()]
    bad = [n for n, b in model.module.named_buffers() if not torch.equal(b, inv_freq(BASE[n[: -len("_inv_freq")]]))]
    print(f"rank {rank}: buffer order {names}", flush=True)
    print(f"rank {rank}: " + (f"WRONG rope tables {bad}" if bad else "rope tables OK"), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
