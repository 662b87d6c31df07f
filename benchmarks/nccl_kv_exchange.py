"""kv-sync's all-at-once exchange on NCCL, at several message sizes: what happens, and how the sandbox names it.

    PYTHONPATH=. python benchmarks/nccl_kv_exchange.py [--sizes 256,65536,262144,16777216] [--json OUT]

Two ranks, one GPU each. Every rank first `dist.send`s a tensor of SIZE float32 to its peer, then `dist.recv`s the
peer's: the pattern of kv-sync's broken variant, which deadlocks on gloo at any size (a gloo send waits for the
matching recv). On NCCL the calls return to Python at once and run on the GPU. Per size it runs the pattern on a
fresh process group initialised lazily (no `device_id`) and eagerly (`device_id=cuda:i`), on a pair already
connected both ways by an earlier exchange (as kv-sync's prefill connects rank 0 to rank 1), and the order-by-rank
fix as a control, and prints the sandbox's verdict and diagnosis for each run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sandbox import launch  # noqa: E402


def exchange(numel: int, eager: bool, ordered: bool, connected: bool) -> str:
    import datetime

    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=30), **({"device_id": device} if eager else {}))
    peer = 1 - rank
    mine, theirs = torch.full((numel,), float(rank), device=device), torch.empty(numel, device=device)
    if connected:  # one exchange in a safe order first: both directions of the pair are then set up
        for sender in (0, 1):
            if rank == sender:
                dist.send(mine, dst=peer)
            else:
                dist.recv(theirs, src=peer)
        torch.cuda.synchronize()
    if ordered and rank == 1:  # the control: rank 1 receives first, so every send meets a posted recv
        dist.recv(theirs, src=peer)
        dist.send(mine, dst=peer)
    else:
        dist.send(mine, dst=peer)  # kv-sync's broken order: both ranks send first
        dist.recv(theirs, src=peer)
    torch.cuda.synchronize()
    ok = bool((theirs == float(peer)).all())
    dist.destroy_process_group()
    return "received" if ok else "wrong data"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="256,65536,262144,4194304", help="float32 elements per message, comma-separated")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    a = p.parse_args()
    rows = []
    for numel in (int(s) for s in a.sizes.split(",")):
        for eager, ordered, connected in ((False, False, False), (True, False, False), (False, False, True),
                                          (False, True, False)):
            res = launch(exchange, world_size=2, gpu=True, args=(numel, eager, ordered, connected), timeout=90)
            init = ("eager" if eager else "lazy") + (", connected" if connected else "")
            row = {"floats": numel, "bytes": numel * 4, "init": init,
                   "order": "by rank (fix)" if ordered else "send first (bug)", "verdict": res.verdict,
                   "kind": res.diagnosis.kind, "wall_s": round(res.wall_s, 2),
                   "summary": res.diagnosis.summary[:300]}
            rows.append(row)
            print(f"{numel * 4:>10} B  {row['init']:15}  {row['order']:17}  {res.verdict.upper():7} "
                  f"[{row['kind']}] {row['wall_s']:6.2f} s  {row['summary'][:160]}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
