"""2-stage pipeline x 2-way data-parallel regression trainer with loss scaling.

Ranks 0,1 run stage 0 (feature encoder), ranks 2,3 run stage 1 (head + loss);
stage-0 rank r feeds stage-1 rank r+2.  Each data-parallel replica reads the
sensor log of one site.  Gradients are averaged inside each stage's
data-parallel group, and the loss scaler's overflow flag is agreed on by the
whole world so that every rank skips the same steps.
"""
import datetime

import torch
import torch.distributed as dist

SITES = {0: {"units_scale": 1.0}, 1: {"units_scale": 40.0}}  # raw sensor units per site
BATCH, DIN, DH, STEPS = 8, 4, 8, 3
LOSS_SCALE = 2.0 ** 12


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    stage, dp_rank = rank // 2, rank % 2
    dp_groups = [dist.new_group([0, 1], timeout=datetime.timedelta(seconds=10)),
                 dist.new_group([2, 3], timeout=datetime.timedelta(seconds=10))]
    dp_group = dp_groups[stage]
    peer = rank + 2 if stage == 0 else rank - 2

    torch.manual_seed(stage)
    layer = torch.nn.Linear(DIN, DH) if stage == 0 else torch.nn.Linear(DH, 1)
    opt = torch.optim.SGD(layer.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(dp_rank)
    units = SITES[dp_rank]["units_scale"]

    def overflow_check(found_inf):
        dist.all_reduce(found_inf)  # world: every rank must take the same decision
        return found_inf.item() > 0

    def average_grads():
        for p in layer.parameters():
            dist.all_reduce(p.grad, group=dp_group)
            p.grad /= 2 * LOSS_SCALE  # mean over replicas, then unscale

    for step in range(STEPS):
        opt.zero_grad()
        x = torch.randn(BATCH, DIN, generator=gen) * units
        y = x.sum(dim=1, keepdim=True)
        found_inf = torch.zeros(1)
        if stage == 0:
            h = torch.relu(layer(x))
            dist.send(h.detach(), dst=peer)
            grad_h = torch.empty_like(h)
            dist.recv(grad_h, src=peer)
            h.backward(grad_h)
        else:
            h = torch.empty(BATCH, DH)
            dist.recv(h, src=peer)
            h.requires_grad_()
            loss = torch.nn.functional.mse_loss(layer(h), y)
            scaled = (loss * LOSS_SCALE).half()
            if not torch.isfinite(scaled):
                # overflow: let every rank know right away so the step is skipped
                found_inf.fill_(1.0)
                overflow_check(found_inf)
                continue
            scaled.float().backward()
            dist.send(h.grad, dst=peer)
        average_grads()
        if overflow_check(found_inf):
            continue
        opt.step()
        if stage == 1:
            print(f"rank {rank} step {step} loss {loss.item():.4f}")

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
