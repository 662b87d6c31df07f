# DDP training of a tabular regressor whose input normalizer keeps dataset
# statistics as registered buffers (saved in the checkpoint with the weights).
import datetime
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

# statistics the normalizer tracks, parsed once at import time
NORMALIZER_STATS = set(s.strip() for s in "mean, std, min, max, p05, p95".split(","))
IN_DIM, HIDDEN, STEPS = 8, 32, 6

class FeatureNormalizer(nn.Module):
    def __init__(self, stats):
        super().__init__()
        for name in NORMALIZER_STATS:
            self.register_buffer(name, stats[name].clone())

    def forward(self, x):
        x = torch.maximum(torch.minimum(x, self.max), self.min)
        x = torch.maximum(torch.minimum(x, self.p95), self.p05)
        return (x - self.mean) / self.std

class Regressor(nn.Module):
    def __init__(self, stats):
        super().__init__()
        self.normalizer = FeatureNormalizer(stats)
        self.mlp = nn.Sequential(nn.Linear(IN_DIM, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))

    def forward(self, x):
        return self.mlp(self.normalizer(x))

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    data = torch.randn(512, IN_DIM) * 3 + 1
    q = torch.quantile(data, torch.tensor([0.05, 0.95]), dim=0)
    stats = {"mean": data.mean(0), "std": data.std(0), "min": data.min(0).values,
             "max": data.max(0).values, "p05": q[0], "p95": q[1]}
    model = DDP(Regressor(stats))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    torch.manual_seed(10 + rank)
    for step in range(STEPS):
        x = torch.randn(32, IN_DIM) * 3 + 1
        y = x.sum(1, keepdim=True)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    sums = {k: f"{v.double().sum().item():.6f}" for k, v in model.module.state_dict().items()}
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, sums)
    if rank == 0:
        bad = sorted(k for k in sums if len({g[k] for g in gathered}) > 1)
        print(f"CHECK state_dict entries differing across ranks: {bad if bad else 'none'}", flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
