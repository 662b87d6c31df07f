"""A send/send deadlock: both ranks send first. A gloo send returns only once the peer has posted its recv."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
peer = 1 - rank
dist.send(torch.ones(8), dst=peer)  # BUG: both block here; FIX: dist.isend + dist.irecv, then wait both
dist.recv(torch.empty(8), src=peer)
