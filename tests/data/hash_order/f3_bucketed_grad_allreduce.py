# Fine-tuning a small encoder block with a frozen embedding. Gradients of the
# trainable parameters are all-reduced in flat buckets of at most BUCKET_CAP elements.
import datetime
import torch
import torch.distributed as dist
import torch.nn as nn

VOCAB, DIM, FFN, CLASSES, BUCKET_CAP, STEPS = 100, 64, 128, 10, 10000, 4

class EncoderClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.attn = nn.MultiheadAttention(DIM, 4, batch_first=True)
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.ffn_up, self.ffn_down = nn.Linear(DIM, FFN), nn.Linear(FFN, DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, tokens):
        h = self.embed(tokens)
        h = self.ln1(h + self.attn(h, h, h, need_weights=False)[0])
        h = self.ln2(h + self.ffn_down(torch.relu(self.ffn_up(h))))
        return self.head(h.mean(1))

def build_buckets(params, names):
    buckets, current, size = [], [], 0
    for name in names:
        if current and size + params[name].numel() > BUCKET_CAP:
            buckets.append(current)
            current, size = [], 0
        current.append(name)
        size += params[name].numel()
    return buckets + [current]

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = EncoderClassifier()
    model.embed.weight.requires_grad_(False)
    params = dict(model.named_parameters())
    trainable = frozenset(n for n, p in params.items() if p.requires_grad)
    buckets = build_buckets(params, trainable)
    opt = torch.optim.Adam([params[n] for n in trainable], lr=1e-3)
    torch.manual_seed(rank)
    for step in range(STEPS):
        tokens = torch.randint(0, VOCAB, (8, 12))
        labels = torch.randint(0, CLASSES, (8,))
        loss = nn.functional.cross_entropy(model(tokens), labels)
        opt.zero_grad()
        loss.backward()
        for bucket in buckets:
            flat = torch.cat([params[n].grad.reshape(-1) for n in bucket])
            dist.all_reduce(flat)
            flat /= world
            offset = 0
            for n in bucket:
                g = params[n].grad
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f} buckets {len(buckets)}", flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
