# ZeRO-1 style training: each rank keeps optimizer state only for the layers it
# owns, steps them, and broadcasts the updated weights from the owner rank.
import datetime
import torch
import torch.distributed as dist
import torch.nn as nn

CFG = dict(vocab=200, dim=48, layers=3, classes=5, lr=3e-3, steps=4, batch=8, seq=10)

class TinyLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.tok_emb = nn.Embedding(c["vocab"], c["dim"])
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(c["dim"]), nn.Linear(c["dim"], c["dim"]), nn.GELU())
            for _ in range(c["layers"]))
        self.final_norm = nn.LayerNorm(c["dim"])
        self.cls_head = nn.Linear(c["dim"], c["classes"])

    def forward(self, tokens):
        h = self.tok_emb(tokens)
        for blk in self.blocks:
            h = h + blk(h)
        return self.cls_head(self.final_norm(h).mean(1))

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = TinyLM(CFG)
    named = dict(model.named_parameters())
    layer_of = {n: n.rsplit(".", 1)[0] for n in named}
    layers = set(layer_of.values())
    owner = {layer: i % world for i, layer in enumerate(layers)}
    mine = [p for n, p in named.items() if owner[layer_of[n]] == rank]
    opt = torch.optim.AdamW(mine, lr=CFG["lr"])
    torch.manual_seed(1000 + rank)
    for step in range(CFG["steps"]):
        tokens = torch.randint(0, CFG["vocab"], (CFG["batch"], CFG["seq"]))
        labels = torch.randint(0, CFG["classes"], (CFG["batch"],))
        loss = nn.functional.cross_entropy(model(tokens), labels)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        for n, p in named.items():
            dist.broadcast(p.data, src=owner[layer_of[n]])
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    digest = torch.tensor([sum(p.double().sum() for p in model.parameters()).item()])
    all_d = [torch.zeros_like(digest) for _ in range(world)]
    dist.all_gather(all_d, digest)
    if rank == 0:
        print("CHECK param digests per rank:", [f"{d.item():.6f}" for d in all_d], flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
