# case: missing_caught_exception_metric
# class: missing_ranks
# names: missing_ranks
# world: 3
# culprits: 2
# cause: dist.all_reduce, line 51
# nccl: yes
"""Three ranks train a token classifier and, every other step, all-reduce their token accuracy
inside a try block that logs and swallows a ZeroDivisionError. Rank 2's step-2 batch is all
padding, so `correct / total` raises before the metric all_reduce; the except clause moves on
and rank 2 skips a collective that ranks 0 and 1 are making, so their next calls no longer match.
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
            try:
                mask = labels != PAD
                correct = int((logits.argmax(1)[mask] == labels[mask]).sum())
                total = int(mask.sum())
                acc = torch.tensor([correct / total])
                dist.all_reduce(acc)
                print(f"rank {rank} step {step}: mean accuracy {acc.item() / world:.3f}")
            except ZeroDivisionError:
                print(f"rank {rank} step {step}: no labelled tokens, metric skipped")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
