# Data-parallel training with per-epoch validation; validation metrics are
# averaged across ranks and drive early stopping (patience on val_loss).
import datetime, io
import math
import torch
import torch.distributed as dist
import torch.nn as nn

CFG = dict(in_dim=20, hidden=32, classes=4, lr=0.05, max_epochs=12, patience=2,
           steps_per_epoch=3, batch=32)
METRICS = {"val_loss", "val_acc", "val_top2", "val_ppl", "val_err", "val_margin",
           "val_conf", "val_entropy"}

def evaluate(model, x, y):
    with torch.no_grad():
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y).item()
        acc = (logits.argmax(1) == y).float().mean().item()
        top2 = (logits.topk(2, 1).indices == y[:, None]).any(1).float().mean().item()
        srt = logits.sort(1, descending=True).values
        prob = logits.softmax(1)
    return {"val_loss": loss, "val_acc": acc, "val_top2": top2, "val_ppl": math.exp(loss),
            "val_err": 1 - acc, "val_margin": (srt[:, 0] - srt[:, 1]).mean().item(),
            "val_conf": prob.max(1).values.mean().item(),
            "val_entropy": -(prob * prob.log()).sum(1).mean().item()}

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(CFG["in_dim"], CFG["hidden"]), nn.ReLU(),
                          nn.Linear(CFG["hidden"], CFG["classes"]))
    opt = torch.optim.SGD(model.parameters(), lr=CFG["lr"])
    gen = torch.Generator().manual_seed(rank)
    val_x = torch.randn(64, CFG["in_dim"], generator=gen)
    val_y = torch.randint(0, CFG["classes"], (64,), generator=gen)
    best, bad_epochs = float("inf"), 0
    for epoch in range(CFG["max_epochs"]):
        for _ in range(CFG["steps_per_epoch"]):
            x = torch.randn(CFG["batch"], CFG["in_dim"], generator=gen)
            y = (x[:, :CFG["classes"]].argmax(1) + (torch.rand(CFG["batch"], generator=gen) < 0.4)) % CFG["classes"]
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
        local = evaluate(model, val_x, val_y)
        metrics = {}
        for name in METRICS:
            t = torch.tensor([local[name]])
            dist.all_reduce(t)
            metrics[name] = t.item() / world
        print(f"rank {rank} epoch {epoch} val_loss {metrics['val_loss']:.4f}", flush=True)
        if metrics["val_loss"] < best - 1e-3:
            best, bad_epochs = metrics["val_loss"], 0
        else:
            bad_epochs += 1
            if bad_epochs >= CFG["patience"]:
                break
    dist.barrier()
    if rank == 0:
        torch.save(model.state_dict(), io.BytesIO())  # in memory: this copy of the case leaves no file
        print(f"RESULT stopped after epoch {epoch}, best val_loss {best:.4f}", flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
