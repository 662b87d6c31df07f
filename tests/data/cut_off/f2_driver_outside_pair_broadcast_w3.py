# case: driver_outside_pair_broadcast_w3
# label: faulty
# world: 3
# culprits: 0
# waiting: 1,2
# kind: left_early
"""World 3. Rank 0 is a driver outside the worker group [1, 2].  All ranks call
new_group([1, 2]); rank 0 then has nothing left to do and exits.  Rank 1
broadcasts "weights" to rank 2 inside the worker group.

Fault: no barrier after init/new_group (TORCH_DIST_INIT_BARRIER unset), so
rank 0 may tear down its gloo pairs while rank 1 or 2 is still connecting to
it inside init_process_group -> that rank fails with "Gloo connectFullMesh
failed ... Connection closed by peer"; the other worker then waits for it in
new_group([1, 2]) or in the broadcast.  Rank 0 made all its calls (left early).
vLLM/flashinfer-style "driver rank not in the worker group".
Modelled on gloo 'Connection closed by peer' failures at init/new_group:
https://github.com/pytorch/pytorch/issues/75512 ,
https://github.com/pytorch/pytorch/issues/57469 ,
https://github.com/pytorch/pytorch/issues/53270
"""
import datetime
import os

import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    workers = dist.new_group([1, 2])
    if rank == 0:
        print(f"rank {rank}: driver done OK", flush=True)
        dist.destroy_process_group()
        return
    w = torch.arange(8, dtype=torch.float32) if rank == 1 else torch.zeros(8)
    dist.broadcast(w, src=1, group=workers)
    assert w[7].item() == 7.0, w
    print(f"rank {rank}: got weights sum={w.sum().item()} OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
