# case: loss_dict_reduce
# label: silent
# world: 4
# culprits: 1,3
# cause: reduce, line 40; order made at line 33
"""reduce_loss_dict: average a detector's loss dict onto rank 0 for logging.

Each rank's loss dict gains a key the first time one of its images produces that loss
term: box-only images give "loss_box", mask images give "loss_mask". Ranks 0 and 2
meet a box image first, ranks 1 and 3 a mask image first. The loss values are
stacked in loss_dict.items() order and summed onto rank 0 with dist.reduce, then
zipped back with rank 0's own names, so rank 0 logs box+mask mixtures for both terms.
Modelled on facebookresearch/maskrcnn-benchmark#309 (reduce_loss_dict stacks
loss_dict.items() and assumes the key order is the same in every process):
https://github.com/facebookresearch/maskrcnn-benchmark/issues/309
"""
import datetime

import torch
import torch.distributed as dist

# (loss term, value) per image; rank r trains on images r and r+4
IMAGES = [("loss_box", 0.5), ("loss_mask", 1.5), ("loss_box", 0.75), ("loss_mask", 3.0),
          ("loss_mask", 2.0), ("loss_box", 0.25), ("loss_mask", 2.5), ("loss_box", 1.25)]


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()

    loss_dict = {}
    for term, value in IMAGES[rank::world]:
        loss_dict[term] = loss_dict.get(term, torch.tensor(0.0)) + value

    names, losses = [], []
    for k, v in loss_dict.items():
        names.append(k)
        losses.append(v)
    all_losses = torch.stack(losses, dim=0)
    dist.reduce(all_losses, dst=0)
    if rank != 0:
        print(f"rank {rank}: sent {names} to rank 0 (nothing to check here)", flush=True)
    else:
        reduced = {k: v.item() / world for k, v in zip(names, all_losses)}
        expected = {t: sum(v for k, v in IMAGES if k == t) / world for t in ("loss_box", "loss_mask")}
        bad = {t: (reduced[t], expected[t]) for t in expected if abs(reduced[t] - expected[t]) > 1e-6}
        if bad:
            print(f"rank 0: WRONG averaged losses (got, expected): {bad}", flush=True)
        else:
            print(f"rank 0: OK {reduced}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
