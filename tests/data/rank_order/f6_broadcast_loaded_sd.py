# case: broadcast_loaded_sd
# label: crash
# world: 3
# culprits: 0
# cause: broadcast, line 39; order made at line 37
"""Rank 0 loads the full checkpoint and broadcasts it entry by entry to the others.

Rank 0 fills `full_sd` in the order the records appear in the checkpoint file (the
saver wrote the head first). The other ranks receive into buffers built in their
own model's parameter order (embedding first). Each rank issues one broadcast per
entry of its own dict, so the broadcasts pair by position and the first one sends
the 8-element head weight into a 6-element embedding buffer.
Modelled on huggingface/accelerate#3982 (fsdp2_load_full_state_dict pairs rank 0's
full_sd.items() with the other ranks' own state dict by position and the broadcasts
misalign) and pytorch/pytorch#84654 (dict order after loading from a checkpoint
differs between ranks): https://github.com/huggingface/accelerate/pull/3982
"""
import datetime

import torch
import torch.distributed as dist

MODEL = [("embed.weight", (3, 2)), ("norm.weight", (2,)), ("head.weight", (4, 2))]
# records in the order the saver wrote them to the file
CHECKPOINT = [("head.weight", 3.0), ("norm.weight", 2.0), ("embed.weight", 1.0)]


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    shapes = dict(MODEL)
    model_sd = {name: torch.zeros(shape) for name, shape in MODEL}

    if rank == 0:
        full_sd = {}
        for name, value in CHECKPOINT:  # "read" the file record by record
            full_sd[name] = torch.full(shapes[name], value)
        for name, full in full_sd.items():
            dist.broadcast(full, src=0)
        model_sd = full_sd
    else:
        for name, local in model_sd.items():
            dist.broadcast(local, src=0)

    want = dict(CHECKPOINT)
    ok = all(torch.equal(t, torch.full(shapes[n], want[n])) for n, t in model_sd.items())
    print(f"rank {rank}: {'OK' if ok else 'WRONG'} loaded weights", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
