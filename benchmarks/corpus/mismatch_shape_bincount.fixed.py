# case: mismatch_shape_bincount
# fixed: torch.bincount(labels, minlength=NUM_CLASSES) gives every rank a histogram of the same length
# world: 3
# nccl: yes
"""The ranks sum a histogram of their labels to weight the classes; every histogram has one bin per class
(minlength), whatever labels a rank holds."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

NUM_CLASSES = 5
dataset_labels = [4, 0, 2, 1, 3, 4, 0, 1, 3, 2, 2, 4]
labels = torch.tensor(dataset_labels[rank::world], device=device)  # rank 1 holds 0, 3, 1, 2

# counts per class seen so far: one bin per class on every rank
counts = torch.bincount(labels, minlength=NUM_CLASSES)
dist.all_reduce(counts)
class_weights = counts.sum() / (NUM_CLASSES * counts.clamp(min=1).float())
print(f"rank {rank}: class weights {[round(w, 2) for w in class_weights.tolist()]}")
dist.destroy_process_group()
