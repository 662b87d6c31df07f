"""Lab 20, build it yourself: a ring all-reduce from send and recv, checked on N ranks against `dist.all_reduce`'s
result, and timed against the alpha-beta model.

Why a ring: every rank talks only to its two neighbours, and each sends about 2(N-1)/N of the tensor in all, so the
bytes per rank hardly grow with N (the latency term does: 2(N-1) steps). It has two phases. Reduce-scatter: the
tensor is cut into N chunks; at each of N-1 steps every rank passes one chunk to its right and adds the chunk that
came from its left, so that rank r ends holding chunk (r+1) % N summed over every rank. All-gather: N-1 more steps
pass those finished chunks around the ring, each overwriting the stale copy, until every rank has every chunk.

What the lab needs, and why each is here rather than in the notebook:
- `ring_all_reduce`: the reference solution (isend and irecv posted together, then waited on: a gloo send returns
  only once the peer has posted its receive, so a blocking send to the right would wait for a neighbour that is
  itself blocked sending).
- `first_attempt`: what most people write first, blocking `send` then `recv`; every rank blocks in its send and the
  sandbox names the cycle (p2p_cycle). `without_all_gather` and `off_by_one`: two plausible wrong rings, for the
  tests and the exercises; their values are wrong, and the check says where.
- `run_on_rank` / `rank_input` / `reference`: the check's harness (each rank fills a tensor whose entries say which
  ranks contributed: rank r holds (i+1)*10**r at index i, so 4 ranks sum to (i+1)*1111 and a missing rank shows as
  a 0 digit) and the single-process reference, the plain sum.
- `traffic`: the sends each rank made and their bytes, read from a run's trace, to check a prediction against.
- `predict_s`: the alpha-beta prediction, 2(N-1) steps of (alpha + (size/N)/beta).

torch is imported inside the functions: a parent that only reads a result (the tests, `traffic`) need not load it.
"""
from __future__ import annotations

from sandbox.course import cost

NUMEL = 10  # the check's tensor: 10 floats do not split evenly over 3 or 4 ranks (chunks of 3, 3, 2, 2 on 4)
DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
               "int8": 1, "uint8": 1, "bool": 1}


def ring_all_reduce(tensor):
    """Sum `tensor` over every rank in place, as `dist.all_reduce(tensor)` does, with a ring of isend/irecv.
    Any number of ranks and any length: `tensor_split` cuts N chunks whose sizes differ by at most one."""
    import torch
    import torch.distributed as dist

    n, me = dist.get_world_size(), dist.get_rank()
    right, left = (me + 1) % n, (me - 1) % n
    flat = tensor.contiguous().view(-1)        # contiguous() is tensor itself when it already is
    chunks = flat.tensor_split(n)              # views into flat: writing a chunk writes the tensor
    inbox = torch.empty_like(chunks[0])        # chunk 0 is the largest

    # Reduce-scatter: at step s, send chunk (me - s) on, add the chunk (me - s - 1) coming from the left.
    for s in range(n - 1):
        out, into = chunks[(me - s) % n], chunks[(me - s - 1) % n]
        got = inbox[:into.numel()]
        for work in (dist.isend(out, right), dist.irecv(got, left)):  # both posted before either is waited on
            work.wait()
        into += got
    # Now chunk (me + 1) % n holds the sum of every rank. All-gather: pass the finished chunks around the ring.
    for s in range(n - 1):
        out, into = chunks[(me + 1 - s) % n], chunks[(me - s) % n]
        for work in (dist.isend(out, right), dist.irecv(into, left)):
            work.wait()
    if flat.data_ptr() != tensor.data_ptr():  # a non-contiguous tensor was summed in a copy
        tensor.copy_(flat.view_as(tensor))
    return tensor


def first_attempt(tensor):
    """The natural first ring: blocking send to the right, then recv from the left. Every rank sends first, and a
    gloo send waits for the matching receive, so all of them wait forever: a point-to-point cycle."""
    import torch
    import torch.distributed as dist

    n, me = dist.get_world_size(), dist.get_rank()
    right, left = (me + 1) % n, (me - 1) % n
    chunks = tensor.view(-1).tensor_split(n)
    inbox = torch.empty_like(chunks[0])
    for s in range(n - 1):
        out, into = chunks[(me - s) % n], chunks[(me - s - 1) % n]
        got = inbox[:into.numel()]
        dist.send(out, dst=right)
        dist.recv(got, src=left)
        into += got
    for s in range(n - 1):
        dist.send(chunks[(me + 1 - s) % n], dst=right)
        dist.recv(chunks[(me - s) % n], src=left)
    return tensor


def without_all_gather(tensor):
    """A ring that stops after the reduce-scatter phase: rank r has the full sum in chunk (r+1) % N only; the other
    chunks hold partial sums. It finishes without a hang, so only the values tell."""
    import torch
    import torch.distributed as dist

    n, me = dist.get_world_size(), dist.get_rank()
    right, left = (me + 1) % n, (me - 1) % n
    chunks = tensor.view(-1).tensor_split(n)
    inbox = torch.empty_like(chunks[0])
    for s in range(n - 1):
        out, into = chunks[(me - s) % n], chunks[(me - s - 1) % n]
        got = inbox[:into.numel()]
        for work in (dist.isend(out, right), dist.irecv(got, left)):
            work.wait()
        into += got
    return tensor


def off_by_one(tensor):
    """The reference ring with the all-gather starting one chunk late: each rank first passes on chunk me, not the
    chunk (me + 1) it just finished, so stale partial sums go round instead of the totals."""
    import torch
    import torch.distributed as dist

    n, me = dist.get_world_size(), dist.get_rank()
    right, left = (me + 1) % n, (me - 1) % n
    chunks = tensor.view(-1).tensor_split(n)
    inbox = torch.empty_like(chunks[0])
    for s in range(n - 1):
        out, into = chunks[(me - s) % n], chunks[(me - s - 1) % n]
        got = inbox[:into.numel()]
        for work in (dist.isend(out, right), dist.irecv(got, left)):
            work.wait()
        into += got
    for s in range(n - 1):
        out, into = chunks[(me - s) % n], chunks[(me - s - 1) % n]  # should be (me + 1 - s) and (me - s)
        got = inbox[:into.numel()]
        for work in (dist.isend(out, right), dist.irecv(got, left)):
            work.wait()
        into.copy_(got)
    return tensor


# ------------------------------------------------------------------------------------------------ the check

def rank_input(rank: int, numel: int = NUMEL):
    """What rank `rank` holds before the all-reduce: (i+1) * 10**rank at index i."""
    import torch

    return torch.arange(1, numel + 1, dtype=torch.float32) * 10.0 ** rank


def run_on_rank(all_reduce, numel: int = NUMEL) -> list[float]:
    """One rank of the check: fill this rank's tensor, call `all_reduce(tensor)` (it sums in place, like
    `dist.all_reduce`; a returned tensor is taken instead), return the result as a list. Starts and ends the
    process group itself when the run did not start one (and waits until every rank's is made before the body
    runs, as the sandbox's own group does)."""
    import torch.distributed as dist

    own = not dist.is_initialized()
    if own:
        from sandbox.rank import all_joined

        dist.init_process_group("gloo")
        # every rank's group made before any runs the body: an empty body raises at once, and a rank that left then
        # would break a peer still connecting (gloo lets each out of init once its own pairs are up)
        all_joined(dist.get_rank(), dist.get_world_size())
    t = rank_input(dist.get_rank(), numel)
    out = all_reduce(t)
    values = (t if out is None else out).tolist()
    if own:
        dist.destroy_process_group()
    return values


def reference(n: int, all_reduce=None, numel: int = NUMEL) -> list[float]:
    """The single-process reference: what `dist.all_reduce` leaves on every rank, the sum of every rank's input
    (`all_reduce`, the function under test, is not used: the reference needs no ranks)."""
    return [(i + 1) * sum(10.0 ** r for r in range(n)) for i in range(numel)]


# ------------------------------------------------------------------------------------------------ reading a run

def p2p_ops(res):
    """Every point-to-point operation the ranks entered, from the trace, one at a time (a `batch_isend_irecv` gives
    each of its ops, as `sandbox.calls.p2p_ops` reads them): (rank, "send" or "recv", peer (None: from any rank),
    bytes)."""
    from sandbox import calls

    for e in res.events:
        if e.get("ev") != "enter":
            continue
        parts = (e.get("p2p") or []) if e.get("op") == "batch_isend_irecv" else [e]
        for (direction, peer, _tag), o in zip(calls.p2p_ops(e), parts):
            numel = 1
            for d in (o.get("shapes") or [[]])[0]:
                numel *= d
            yield e["rank"], direction, peer, numel * DTYPE_BYTES.get((o.get("dtypes") or ["float32"])[0], 4)


def traffic(res) -> dict[int, dict]:
    """Each rank's point-to-point sends in a run, from its trace: {rank: {"sends": k, "bytes": b}}, counting every
    send and isend the rank entered (those of a batch_isend_irecv too), with the bytes of its tensor."""
    out = {r.rank: {"sends": 0, "bytes": 0} for r in res.ranks}
    for rank, way, _peer, size in p2p_ops(res):
        if way == "send":
            mine = out.setdefault(rank, {"sends": 0, "bytes": 0})
            mine["sends"] += 1
            mine["bytes"] += size
    return out


def is_a_ring(numel: int = NUMEL, itemsize: int = 4):
    """The ring's rule (a `sandbox.lab.Rule`), what the sum alone cannot tell: data moves only by point-to-point
    calls (no collective inside "the ring"), each rank sends only to its right neighbour and receives only from its
    left one, and sends at most 2(N-1) chunks of the tensor of `numel` items (the largest chunk, N-1 times in each
    phase): about 2(N-1)/N of it. A reduce to rank 0 and a broadcast back, or a ring that passes the whole tensor
    around (N-1 times the tensor, with no reduce-scatter phase), give the right sum and break it."""
    from sandbox.calls import OPS
    from sandbox.lab.rules import MOVES, Rule
    from sandbox.words import plural

    def found(res) -> str | None:
        n = res.world_size
        colls = sorted((e["rank"], e["op"]) for e in res.events if e.get("ev") == "enter" and e.get("op") in MOVES
                       and OPS[e["op"]].kind != "p2p")
        if colls:
            return f"rank {colls[0][0]} called {colls[0][1]}: a ring moves the data with send and recv only"
        sent: dict[int, int] = {}
        for rank, way, peer, size in p2p_ops(res):
            if way == "send" and peer != (rank + 1) % n:
                return f"rank {rank} sent to rank {peer}; in a ring it sends only to rank {(rank + 1) % n}, its right"
            if way == "recv" and peer is not None and peer != (rank - 1) % n:
                return (f"rank {rank} received from rank {peer}; in a ring it receives only from rank "
                        f"{(rank - 1) % n}, its left")
            if way == "send":
                sent[rank] = sent.get(rank, 0) + size
        most = 2 * (n - 1) * -(-numel // n) * itemsize
        over = {r: b for r, b in sent.items() if b > most}
        if over:
            r = min(over)
            return (f"rank {r} sent {plural(over[r], 'byte')}, where a ring on {n} ranks sends at most {most}: "
                    f"2(N-1) = {2 * (n - 1)} chunks of at most {-(-numel // n)} of the tensor's {numel} items")
        return None

    return Rule(says="a ring all-reduce passes chunks only to the right neighbour, about 2(N-1)/N of the tensor per"
                     " rank", found=found)


def traffic_table(res, sends: int | None = None, nbytes: int | None = None) -> str:
    """The sends of every rank, one line each, beside a prediction of how many sends and how many bytes per rank.
    The bytes count as right within 10%: chunks differ in size, so the ranks of one ring send a little more or
    less than one another."""
    lines = []
    for rank, t in sorted(traffic(res).items()):
        line = f"rank {rank}: {t['sends']} sends, {t['bytes']} bytes"
        marks = []
        if sends is not None:
            marks.append(f"{sends} sends: {'right' if sends == t['sends'] else 'wrong'}")
        if nbytes is not None:
            marks.append(f"{nbytes} bytes: {'right' if abs(nbytes - t['bytes']) <= 0.1 * t['bytes'] else 'wrong'}")
        lines.append(line + (f"   (you said {', '.join(marks)})" if marks else ""))
    return "\n".join(lines)


def predict_s(size_bytes: float, n: int, alpha_s: float, beta_Bps: float) -> float:
    """The alpha-beta time of a ring all-reduce of `size_bytes` on `n` ranks: 2(n-1) steps, each one message of
    size/n bytes, costing alpha (the per-message latency, s) + (size/n)/beta (beta: bytes per second). The lab
    21 model (`cost.collective_s`) says the same for every ring collective."""
    return cost.collective_s("all_reduce", size_bytes, n, alpha_s, beta_Bps)
