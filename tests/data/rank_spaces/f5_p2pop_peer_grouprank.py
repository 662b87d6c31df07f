# case: p2pop_peer_grouprank
# label: silent
# world: 4
# culprits: 0, 1, 2, 3
# cause: dist.P2POp(dist.isend, send, partner, group=ring) (and the irecv next to it), line 28
"""A context-parallel ring whose order comes from a placement list
[1, 0, 3, 2] (new_group(..., sort_ranks=False): group rank == ring position).
Each rank swaps its block with the rank half a ring away.  ``partner`` is a
ring position, i.e. a rank WITHIN ``ring``, but it is given to P2POp as
``peer``, which torch reads as a GLOBAL rank.  Every number 0-3 is valid in
both spaces, so the exchange pairs up {1,2} and {0,3} instead of {1,3} and
{0,2}: no error, every rank silently gets the wrong block.  Modelled on vllm
PR 55804 (EPLB passes group-local peers as P2POp.peer,
https://github.com/vllm-project/vllm/pull/55804)."""
import datetime
import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
ORDER = [1, 0, 3, 2]                        # ring position -> global rank
ring = dist.new_group(ORDER, sort_ranks=False)
pos = dist.get_rank(ring)
partner = (pos + 2) % len(ORDER)            # ring position half a ring away
send = torch.tensor([100.0 + rank])
recv = torch.zeros(1)
ops = [dist.P2POp(dist.isend, send, partner, group=ring),
       dist.P2POp(dist.irecv, recv, partner, group=ring)]
for work in dist.batch_isend_irecv(ops):
    work.wait()
expected = 100.0 + ORDER[partner]
verdict = "OK" if recv.item() == expected else "WRONG"
sys.stdout.write(f"rank {rank}: got={recv.item()} expected={expected} {verdict}\n")
dist.destroy_process_group()
