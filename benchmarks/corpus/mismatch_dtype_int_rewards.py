# case: mismatch_dtype_int_rewards
# class: mismatch/dtype
# names: mismatch
# world: 3
# culprits: 1
# cause: all_reduce, line 23
# nccl: yes
"""The ranks sum their rollouts' rewards; the scorer gives 1 or 0 for a solved or failed task and a float for
partial credit, and rank 1 got only whole scores, so torch.tensor makes its rewards int64, not float32."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

# one score per rollout, as the scorer returned them; each rank ran every world-th rollout
scores = [0.5, 1, 0, 1, 0, 1, 0.25, 1, 0.75]
rewards = torch.tensor(scores[rank::world], device=device)  # rank 1: [1, 0, 1], all ints

dist.all_reduce(rewards)  # slot i: the sum of every rank's i-th rollout
mean_reward = rewards.sum().item() / len(scores)
print(f"rank {rank}: mean reward {mean_reward:.3f}")
dist.destroy_process_group()
