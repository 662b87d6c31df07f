# case: missing_caught_exception_metric
# fixed: all-reduce the (correct, total) counts outside any try block and divide afterwards
# world: 3
# nccl: yes
"""Three ranks train a token classifier and, every other step, report the global token accuracy.
Rank 2's step-2 batch is all padding; each rank all-reduces its (correct, total) counts and the
division happens only on the summed counts, so no rank can drop out of the metric all_reduce.
From: https://github.com/Lightning-AI/pytorch-lightning/issues/6430
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn

PAD = -100


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Linear(8, 5)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)
    for step in range(5):
        x = torch.randn(16, 8, generator=gen)
        labels = torch.randint(0, 5, (16,), generator=gen)
        if rank == 2 and step == 2:
            labels[:] = PAD  # a batch made only of padding tokens
        logits = model(x)
        n_tok = max(1, int((labels != PAD).sum()))
        loss = nn.functional.cross_entropy(logits, labels, ignore_index=PAD, reduction="sum")
        loss = loss / n_tok
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        if step % 2 == 0:
            mask = labels != PAD
            correct = float((logits.argmax(1)[mask] == labels[mask]).sum())
            counts = torch.tensor([correct, float(mask.sum())])
            dist.all_reduce(counts)
            print(f"rank {rank} step {step}: accuracy {counts[0].item() / counts[1].item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
