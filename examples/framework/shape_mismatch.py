"""An all_reduce where rank 3 passes 5 elements and the others 4: gloo reduces what it can, so ranks 0-2 finish
with wrong values.
Run: python -m sandbox.run -n 4 examples/framework/shape_mismatch.py"""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.full((5 if rank == 3 else 4,), 1.5)  # BUG: rank 3 passes one element more
dist.all_reduce(t)
print(t.tolist())
dist.destroy_process_group()
