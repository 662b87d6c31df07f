# Manual data-parallel training of a small MLP classifier; gradients are
# averaged per parameter group (decay / no-decay), AdamW-style.
import datetime
import torch
import torch.distributed as dist
import torch.nn as nn

CONFIG = {"in_dim": 32, "hidden": 64, "classes": 10, "lr": 1e-2,
          "weight_decay": 0.01, "steps": 5, "batch": 16}

class Classifier(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed = nn.Linear(cfg["in_dim"], cfg["hidden"])
        self.norm = nn.LayerNorm(cfg["hidden"])
        self.block1 = nn.Linear(cfg["hidden"], cfg["hidden"])
        self.block2 = nn.Linear(cfg["hidden"], cfg["hidden"] // 2)
        self.head = nn.Linear(cfg["hidden"] // 2, cfg["classes"])

    def forward(self, x):
        x = self.norm(torch.relu(self.embed(x)))
        x = torch.relu(self.block1(x))
        return self.head(torch.relu(self.block2(x)))

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = Classifier(CONFIG)
    params = dict(model.named_parameters())
    no_decay = {n for n in params if n.endswith("bias") or n.startswith("norm")}
    decay = set(params) - no_decay
    opt = torch.optim.AdamW([
        {"params": [params[n] for n in decay], "weight_decay": CONFIG["weight_decay"]},
        {"params": [params[n] for n in no_decay], "weight_decay": 0.0},
    ], lr=CONFIG["lr"])
    torch.manual_seed(100 + rank)
    for step in range(CONFIG["steps"]):
        x = torch.randn(CONFIG["batch"], CONFIG["in_dim"])
        y = torch.randint(0, CONFIG["classes"], (CONFIG["batch"],))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        for group_names in (decay, no_decay):
            for name in group_names:
                grad = params[name].grad
                dist.all_reduce(grad)
                grad /= world
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
