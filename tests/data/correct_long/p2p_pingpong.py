"""Point-to-point ping-pong thousands of times (2 ranks): blocking send/recv,
then isend/irecv + wait, with tags.

Stresses: a long stream of blocking sends and receives where each rank is, at
almost every instant, blocked in a send or recv whose partner is about to be
posted. Rank 0 always sends first and rank 1 always receives first (no
send/send cycle); in the async phase each rank posts its irecv before its isend
and waits on both. Every received value is checked.
"""
# ranks: 2
import os

import torch
import torch.distributed as dist

BLOCKING = 600
ASYNC = 400


def main():
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")
    peer = 1 - rank
    buf = torch.zeros(2)

    # Blocking ping-pong: 0 -> 1 -> 0, the value incremented on each hop.
    val = 0.0
    for i in range(BLOCKING):
        if rank == 0:
            dist.send(torch.tensor([val, float(i)]), dst=peer)
            dist.recv(buf, src=peer)
            if buf.tolist() != [val + 1, float(i)]:
                raise RuntimeError(f"ping {i}: got {buf.tolist()}")
            val = buf[0].item() + 1
        else:
            dist.recv(buf, src=peer)
            if buf[1].item() != float(i) or buf[0].item() != 2.0 * i:
                raise RuntimeError(f"pong {i}: got {buf.tolist()}")
            dist.send(torch.tensor([buf[0].item() + 1, float(i)]), dst=peer)

    # Async exchange: both ranks post irecv then isend and wait on both.
    for i in range(ASYNC):
        out = torch.tensor([float(rank), float(i)])
        inc = torch.zeros(2)
        tag = i % 3
        rr = dist.irecv(inc, src=peer, tag=tag)
        sr = dist.isend(out, dst=peer, tag=tag)
        sr.wait()
        rr.wait()
        if inc.tolist() != [float(peer), float(i)]:
            raise RuntimeError(f"exchange {i}: got {inc.tolist()}")
    print(f"rank {rank}: {BLOCKING} ping-pongs and {ASYNC} exchanges ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
