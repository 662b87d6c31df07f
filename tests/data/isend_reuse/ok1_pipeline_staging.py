"""Two-stage pipeline-parallel forward, checked against the unpartitioned model.

Rank 0 holds the first half of a small MLP, rank 1 the second half.  The
batch is split into micro-batches; stage 0 streams its activations to stage 1
with non-blocking sends so it can keep computing, and stage 1 finishes the
forward pass.  At the end stage 1 compares its output with a single-process
reference run of the full model and fails if they differ.
"""
import datetime
import time

import torch
import torch.distributed as dist

HIDDEN, MICRO, N_MICRO = 64, 8, 4


def build_model():
    torch.manual_seed(0)
    return (torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU()),
            torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh()))


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    stage0, stage1 = build_model()
    batch = torch.randn(N_MICRO * MICRO, HIDDEN, generator=torch.Generator().manual_seed(1))
    micro_batches = batch.chunk(N_MICRO)

    with torch.no_grad():
        if rank == 0:
            sent = []   # keep each activation alive until its send completes
            reqs = []
            for mb in micro_batches:
                act = stage0(mb)
                sent.append(act)
                reqs.append(dist.isend(act, dst=1))
            for req in reqs:
                req.wait()
        else:
            time.sleep(0.5)   # stage 1 is still busy with the previous step
            outputs = []
            for _ in range(N_MICRO):
                act = torch.empty(MICRO, HIDDEN)
                dist.recv(act, src=0)
                outputs.append(stage1(act))
            expected = stage1(stage0(batch))
            got = torch.cat(outputs)
            for i, (g, e) in enumerate(zip(got.chunk(N_MICRO), expected.chunk(N_MICRO))):
                if not torch.allclose(g, e, atol=1e-5):
                    raise RuntimeError(f"pipeline output mismatch in micro-batch {i}: "
                                       f"max abs diff {(g - e).abs().max().item():.4f}")
            print("pipeline output matches reference", flush=True)

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
