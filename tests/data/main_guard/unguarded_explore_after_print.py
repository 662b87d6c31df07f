"""Mistake: the script imports torch.distributed, prints a banner, defines the
rank function and then calls launch(..., explore=4) at the top level with no
`if __name__ == "__main__":` guard. Each rank of each explored schedule would
import the script, print the banner and start exploring again.
"""
# expect: guard
import torch.distributed as dist

print("checking send/recv ring under several schedules...")

import torch

from sandbox import launch


def ring_pass():
    rank = dist.get_rank()
    world = dist.get_world_size()
    send = torch.tensor([float(rank)])
    recv = torch.zeros(1)
    if rank % 2 == 0:
        dist.send(send, dst=(rank + 1) % world)
        dist.recv(recv, src=(rank - 1) % world)
    else:
        dist.recv(recv, src=(rank - 1) % world)
        dist.send(send, dst=(rank + 1) % world)
    assert recv.item() == float((rank - 1) % world)


result = launch(ring_pass, world_size=2, init=True, explore=4)
print(f"RESULT ok={result.ok}")
