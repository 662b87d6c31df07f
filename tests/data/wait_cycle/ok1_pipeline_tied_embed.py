"""Three-stage pipeline for a tiny language model with tied input/output embeddings.

Stage 0 holds the token embedding, stage 1 a hidden block, the last stage the
output head, which reuses its own copy of the embedding matrix.  Activations
flow forward with send/recv, gradients flow back the same way, and the two
copies of the tied embedding are kept identical by all-reducing their
gradients over the embedding group (first and last stage).
"""
import datetime

import torch
import torch.distributed as dist

VOCAB, DIM, SEQ, STEPS = 32, 16, 8, 3


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    first, last = rank == 0, rank == world - 1
    embed_group = dist.new_group([0, world - 1], timeout=datetime.timedelta(seconds=10))

    torch.manual_seed(0)
    emb = torch.nn.Embedding(VOCAB, DIM)  # same init on the first and the last stage
    block = torch.nn.Linear(DIM, DIM)
    params = list(block.parameters()) + (list(emb.parameters()) if first or last else [])
    opt = torch.optim.SGD(params, lr=0.1)
    tokens = torch.randint(0, VOCAB, (SEQ,))
    targets = torch.roll(tokens, -1)

    def sync_tied_if_ready(state):
        # reduce the tied-embedding gradient once both pipeline directions are done
        if state["synced"] or not (first or last) or emb.weight.grad is None:
            return
        dist.all_reduce(emb.weight.grad, group=embed_group)
        state["synced"] = True

    for step in range(STEPS):
        opt.zero_grad()
        state = {"synced": False}
        if first:
            h_in = emb(tokens)
        else:
            h_in = torch.empty(SEQ, DIM)
            dist.recv(h_in, src=rank - 1)
            h_in.requires_grad_()
        h_out = torch.tanh(block(h_in))
        if last:
            loss = torch.nn.functional.cross_entropy(h_out @ emb.weight.t(), targets)
            loss.backward()
        if not last:
            dist.send(h_out.detach(), dst=rank + 1)
            grad = torch.empty(SEQ, DIM)
            dist.recv(grad, src=rank + 1)
            h_out.backward(grad)
        if not first:
            dist.send(h_in.grad, dst=rank - 1)
        sync_tied_if_ready(state)
        opt.step()
        if last:
            print(f"step {step} loss {loss.item():.4f}")

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
