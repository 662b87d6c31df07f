# case: mismatch_shape_uneven_gather
# fixed: pad every share to the chunk size before all_gather, drop the padding after
# world: 4
# nccl: yes
"""Each rank predicts its share of 10 samples and all_gathers the logits, each share padded to the chunk size so
every rank sends the same shape; the padding is dropped afterwards."""
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
padded = torch.zeros(chunk, logits.shape[1], device=device)
padded[:len(logits)] = logits
gathered = [torch.empty_like(padded) for _ in range(world)]
dist.all_gather(gathered, padded)
preds = torch.cat(gathered)[:len(samples)].argmax(1)  # the padding sits at the end of the last share
if rank == 0:
    print(f"predictions for {len(preds)} samples: {preds.tolist()}")
dist.destroy_process_group()
