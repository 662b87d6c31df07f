# case: mismatch_dtype_int_rewards
# fixed: torch.tensor(..., dtype=torch.float32) whatever scores a rank got
# world: 3
# nccl: yes
"""The ranks sum their rollouts' rewards; the scorer gives 1 or 0 for a solved or failed task and a float for
partial credit, and every rank builds its rewards as float32 whatever scores it got."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

# one score per rollout, as the scorer returned them; each rank ran every world-th rollout
scores = [0.5, 1, 0, 1, 0, 1, 0.25, 1, 0.75]
rewards = torch.tensor(scores[rank::world], dtype=torch.float32, device=device)  # rank 1: [1, 0, 1] as floats

dist.all_reduce(rewards)  # slot i: the sum of every rank's i-th rollout
mean_reward = rewards.sum().item() / len(scores)
print(f"rank {rank}: mean reward {mean_reward:.3f}")
dist.destroy_process_group()
