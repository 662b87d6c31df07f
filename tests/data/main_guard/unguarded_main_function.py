"""Mistake: the launch() call is tucked into a main() function, which looks
tidy, but main() itself is called at module level without an
`if __name__ == "__main__":` guard, so importing this script (as every rank
does) still runs launch() again.
"""
# expect: guard
import torch
import torch.distributed as dist

from sandbox import launch


def broadcast_check(value):
    t = torch.tensor([value if dist.get_rank() == 0 else 0.0])
    dist.broadcast(t, src=0)
    assert t.item() == value, t.item()


def main():
    result = launch(broadcast_check, world_size=2, args=(42.0,), init=True)
    print(result.diagnosis.summary)
    print(f"RESULT ok={result.ok}")


main()
