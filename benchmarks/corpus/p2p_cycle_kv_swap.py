# case: p2p_cycle_kv_swap
# class: p2p/cycle
# names: p2p_cycle
# world: 2
# culprits: 0, 1
# cause: send, line 23
# nccl: no
"""Two context-parallel ranks swap their halves of the KV cache, but both send first: each blocking send waits for a
recv the other rank only posts after its own send returns."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

peer = 1 - rank
keys = torch.randn(4, 16, 64, device=device)  # (heads, tokens, head_dim) of this rank's half of the sequence
values = torch.randn(4, 16, 64, device=device)
kv = torch.stack([keys, values])
dist.send(kv, dst=peer)  # both ranks block here
peer_kv = torch.empty_like(kv)
dist.recv(peer_kv, src=peer)

full_keys = torch.cat([keys, peer_kv[0]], dim=1) if rank == 0 else torch.cat([peer_kv[0], keys], dim=1)
print(f"rank {rank}: attention over {full_keys.shape[1]} tokens")
dist.destroy_process_group()
