# case: mismatch_shape_uneven_gather
# class: mismatch/shape
# names: mismatch
# world: 4
# culprits: 3
# cause: all_gather, line 28
# nccl: yes
"""Each rank predicts its share of 10 samples and all_gathers the logits; the shares are 3, 3, 3 and 1, so rank 3
gathers tensors of another shape and gloo aborts on the size mismatch."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
samples = torch.randn(10, 4)
model = torch.nn.Linear(4, 2).to(device)
chunk = -(-len(samples) // world)  # ceil(10 / 4) = 3: shares of 3, 3, 3 and 1
batch = samples[rank * chunk:(rank + 1) * chunk].to(device)

with torch.no_grad():
    logits = model(batch)
gathered = [torch.empty_like(logits) for _ in range(world)]
dist.all_gather(gathered, logits)
preds = torch.cat(gathered).argmax(1)
if rank == 0:
    print(f"predictions for {len(preds)} samples: {preds.tolist()}")
dist.destroy_process_group()
