# case: grad_ready_order
# label: crash
# world: 3
# culprits: 2
# cause: all_reduce, line 43; order made at line 33
"""Manual gradient sync that reduces each gradient in the order it became ready.

A two-branch (image/text) model runs each branch the first time the rank's batch
meets that modality. A post-accumulate-grad hook appends each parameter's name to
`ready` when its gradient lands, so `ready` follows the reverse of the rank's forward
order. The rank then all_reduces one gradient per entry of `ready`. Ranks 0 and 1 see
an image first, rank 2 a text sample first, so at position 0 ranks 0/1 reduce the
6-element text gradient while rank 2 reduces the 12-element image gradient.
Modelled on deepspeedai/DeepSpeed#2343 (ZeRO-2 gives faulty gradients when ranks get
their gradients in a different order) and the answer in deepspeedai/DeepSpeed#1186:
https://github.com/deepspeedai/DeepSpeed/issues/2343
"""
import datetime

import torch
import torch.distributed as dist

SHAPES = {"img_proj": (4, 3), "txt_proj": (2, 3)}
BATCH = ["img", "img", "txt", "txt", "txt", "img"]  # rank r gets samples r and r+3


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    params = {n: torch.nn.Parameter(torch.ones(s)) for n, s in SHAPES.items()}
    ready = []
    for name, p in params.items():
        p.register_post_accumulate_grad_hook(lambda p, name=name: ready.append(name))

    feats = {}  # modality -> summed features, in the order the batch meets it
    for i in range(rank, len(BATCH), world):
        mod = BATCH[i]
        feats[mod] = feats.get(mod, 0) + torch.full(SHAPES[mod + "_proj"], float(i + 1))
    loss = sum((params[m + "_proj"] * f).sum() for m, f in feats.items())
    loss.backward()

    for name in ready:
        dist.all_reduce(params[name].grad)

    ok = True
    for name, shape in SHAPES.items():
        want = sum(float(i + 1) for i, m in enumerate(BATCH) if m + "_proj" == name)
        ok = ok and torch.equal(params[name].grad, torch.full(shape, want))
    print(f"rank {rank}: {'OK' if ok else 'WRONG'} gradients after sync (ready={ready})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
