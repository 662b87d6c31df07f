# case: p2p_cycle_pipeline
# class: p2p/cycle
# names: p2p_cycle
# world: 2
# culprits: 0, 1
# cause: send, line 27
# nccl: no
"""A two-stage pipeline over two micro-batches: stage 0 runs every forward before any backward while stage 1 runs
one forward then one backward each, so stage 0 sends activation 2 while stage 1 sends gradient 1."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
layer = torch.nn.Linear(64, 64).to(device)
micro_batches = [torch.randn(8, 64, device=device) for _ in range(2)]

if rank == 0:  # first stage
    outputs = []
    for batch in micro_batches:
        outputs.append(layer(batch))
        dist.send(outputs[-1].detach(), dst=1)  # all forwards first, then all backwards
    for out in outputs:
        grad = torch.empty_like(out)
        dist.recv(grad, src=1)
        out.backward(grad)
else:  # last stage
    for _ in micro_batches:
        activation = torch.empty(8, 64, device=device, requires_grad=True)
        dist.recv(activation, src=0)
        layer(activation).pow(2).mean().backward()
        dist.send(activation.grad, dst=0)

print(f"rank {rank}: grad norm {layer.weight.grad.norm():.4f}")
dist.destroy_process_group()
