# LoRA fine-tuning of a frozen attention block; only the adapter weights are
# trained, and their gradients are synchronised in one flat all_reduce.
import datetime
import torch
import torch.distributed as dist
import torch.nn as nn

DIM, RANK_R, ALPHA, LR, STEPS = 64, 4, 8.0, 5e-3, 5

class LoRALinear(nn.Module):
    def __init__(self, dim, r):
        super().__init__()
        self.base = nn.Linear(dim, dim)
        self.base.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.randn(r, dim) * 0.02)
        self.lora_B = nn.Parameter(torch.randn(dim, r) * 0.02)

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * (ALPHA / RANK_R)

class AttentionWithLoRA(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj = LoRALinear(DIM, RANK_R), LoRALinear(DIM, RANK_R)
        self.v_proj, self.o_proj = LoRALinear(DIM, RANK_R), LoRALinear(DIM, RANK_R)

    def forward(self, x):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        att = torch.softmax(q @ k.transpose(1, 2) / DIM ** 0.5, -1)
        return self.o_proj(att @ v)

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = AttentionWithLoRA()
    params = dict(model.named_parameters())
    adapter_names = sorted(n for n, p in params.items() if p.requires_grad)
    opt = torch.optim.AdamW([params[n] for n in adapter_names], lr=LR)
    torch.manual_seed(rank + 7)
    for step in range(STEPS):
        x = torch.randn(4, 16, DIM)
        loss = (model(x) - x.roll(1, dims=1)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        flat = torch.cat([params[n].grad.flatten() for n in adapter_names])
        dist.all_reduce(flat)
        flat /= world
        for chunk, n in zip(flat.split([params[n].numel() for n in adapter_names]), adapter_names):
            params[n].grad.copy_(chunk.view_as(params[n]))
        opt.step()
    digests = {n: f"{params[n].double().sum().item():.8f}" for n in sorted(adapter_names)}
    gathered = [None] * world
    dist.all_gather_object(gathered, digests)
    if rank == 0:
        diff = [n for n in digests if len({g[n] for g in gathered}) > 1]
        print(f"CHECK adapter weights differing across {world} ranks: "
              f"{len(diff)}/{len(digests)} {diff}", flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
