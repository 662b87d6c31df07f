# case: norms_sorted_by_value
# label: silent
# world: 2
# culprits: 0,1
# cause: all_gather, line 38; order made at line 33
"""Optimizer monitor: global per-layer gradient norms, largest local norm first.

Every rank builds `sq_norms` in the same fixed layer order, but the monitor then walks
the layers sorted by the rank's OWN squared norm (largest first, to report the top
layers) and issues one all_gather per layer in that order. The local norms come from
each rank's data shard, so rank 0 walks attn, embed, mlp and rank 1 walks mlp, embed,
attn: the first and last all_gathers mix attn with mlp on both ranks.
Modelled on mosaicml/composer#2513 (OptimizerMonitor all_reduce wrong because the
metric keys were sorted by a key that did not fix their order, so each rank summed
norms of different layers): https://github.com/mosaicml/composer/issues/2513
"""
import datetime

import torch
import torch.distributed as dist

LAYERS = ["embed", "attn", "mlp"]
# squared-gradient contribution of each sample to each layer; rank r gets samples r, r+2
SAMPLES = [(1.0, 4.0, 2.0), (3.0, 1.0, 2.0), (2.0, 2.0, 1.0), (1.0, 1.0, 3.0)]


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    shard = SAMPLES[rank::world]

    sq_norms = {name: torch.tensor([sum(s[i] for s in shard)]) for i, name in enumerate(LAYERS)}
    order = sorted(sq_norms, key=lambda n: sq_norms[n].item(), reverse=True)

    global_sq = {}
    for name in order:
        gathered = [torch.zeros(1) for _ in range(world)]
        dist.all_gather(gathered, sq_norms[name])
        global_sq[name] = torch.cat(gathered).sum().item()

    expected = {name: sum(s[i] for s in SAMPLES) for i, name in enumerate(LAYERS)}
    bad = {n: (global_sq[n], expected[n]) for n in LAYERS if global_sq[n] != expected[n]}
    if bad:
        print(f"rank {rank}: WRONG global squared norms (got, expected): {bad} order={order}", flush=True)
    else:
        print(f"rank {rank}: OK {global_sq}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
