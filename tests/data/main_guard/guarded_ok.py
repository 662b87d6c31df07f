"""Correct: the rank function is defined at module level and launch() is
called only under `if __name__ == "__main__":`, so ranks can import this
script safely. Runs a plain launch and an explore=4 launch; both must be ok.
"""
# expect: ok
import torch
import torch.distributed as dist

from sandbox import launch

print("module imported")  # harmless top-level side effect


def allreduce_check(scale):
    rank = dist.get_rank()
    world = dist.get_world_size()
    t = torch.tensor([scale * (rank + 1)])
    dist.all_reduce(t)
    assert t.item() == scale * world * (world + 1) / 2, t.item()


if __name__ == "__main__":
    first = launch(allreduce_check, world_size=4, args=(2.0,), init=True)
    print(first.verdict, first.diagnosis.summary)
    second = launch(allreduce_check, world_size=2, args=(1.0,), init=True, explore=4)
    print(f"RESULT ok={first.ok and second.ok}")
