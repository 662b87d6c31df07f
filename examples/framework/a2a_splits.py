"""Token routing with all_to_all_single: every rank expects 2 elements from each peer, but rank 2 computed its
send splits from stale counts and sends [3, 1, 2, 2].
Run: python -m sandbox.run -n 4 examples/framework/a2a_splits.py"""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
send_splits = [3, 1, 2, 2] if rank == 2 else [2] * world  # BUG: stale routing counts on rank 2
recv_splits = [2] * world
tokens = torch.full((sum(send_splits),), float(rank))
out = torch.empty(sum(recv_splits))
dist.all_to_all_single(out, tokens, output_split_sizes=recv_splits, input_split_sizes=send_splits)
print(out.tolist())
dist.destroy_process_group()
