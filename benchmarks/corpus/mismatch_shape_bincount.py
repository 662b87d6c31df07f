# case: mismatch_shape_bincount
# class: mismatch/shape
# names: mismatch
# world: 3
# culprits: 1
# cause: all_reduce, line 25
# nccl: yes
"""The ranks sum a histogram of their labels to weight the classes; torch.bincount sizes it by the largest label a
rank holds, and rank 1's shard has no class 4, so its histogram is one shorter and the all_reduce breaks."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

NUM_CLASSES = 5
dataset_labels = [4, 0, 2, 1, 3, 4, 0, 1, 3, 2, 2, 4]
labels = torch.tensor(dataset_labels[rank::world], device=device)  # rank 1 holds 0, 3, 1, 2

# counts per class seen so far: bincount's length is max(label) + 1 on this rank
counts = torch.bincount(labels)
dist.all_reduce(counts)
class_weights = counts.sum() / (NUM_CLASSES * counts.clamp(min=1).float())
print(f"rank {rank}: class weights {[round(w, 2) for w in class_weights.tolist()]}")
dist.destroy_process_group()
