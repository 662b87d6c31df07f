# case: missing_ranks_swallowed_error
# fixed: a corrupt sample becomes a zero sample, so the rank still makes that step's all_reduce
# world: 3
# nccl: yes
"""Each rank trains on every third line of a JSON-lines file; one line was cut short, and rank 1 replaces it with a
zero sample, which adds no gradient but keeps that step's all_reduce, so every rank makes the same calls."""
import datetime
import json

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

lines = ['{"x": [1.0, 2.0], "y": 1.0}', '{"x": [0.5, 1.0], "y": 0.0}', '{"x": [2.0, 0.0], "y": 3.0}',
         '{"x": [1.0, 1.0], "y": 2.0}', '{"x": [3.0, 1.0], "y": 1', '{"x": [0.0, 1.0], "y": 1.0}',
         '{"x": [1.0, 0.0], "y": 0.5}', '{"x": [2.0, 2.0], "y": 4.0}', '{"x": [1.0, 3.0], "y": 2.0}']
weights = torch.zeros(2, device=device, requires_grad=True)

for line in lines[rank::world]:
    try:
        sample = json.loads(line)
    except json.JSONDecodeError as err:
        print(f"rank {rank}: skipping a corrupt sample ({err})")
        sample = {"x": [0.0, 0.0], "y": 0.0}  # no gradient, but the step's all_reduce still happens
    x = torch.tensor(sample["x"], device=device)
    loss = (x @ weights - sample["y"]) ** 2
    loss.backward()
    with torch.no_grad():
        dist.all_reduce(weights.grad)
        weights -= 0.01 * weights.grad / world
        weights.grad = None
print(f"rank {rank}: weights {[round(w, 4) for w in weights.tolist()]}")
dist.destroy_process_group()
