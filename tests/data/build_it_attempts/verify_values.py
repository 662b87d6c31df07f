"""Check the VALUES claimed in MANIFEST.json with plain torch (gloo, CPU), without the sandbox package.

The lab attempts import names from `sandbox.course.*` / `sandbox.compat` (as the notebooks' learner cells do).
This harness never imports the real sandbox: it installs STAND-IN modules in sys.modules first, written only
from the labs' text (shapes, batch sizes, names): a model with the same layers, the same API
(make_model, local, loss_fn, weights, train, fsdp, shard, start, forward, ...). So what is verified is the
algorithm's numbers on a model of the lab's shape, not the sandbox's exact numbers.

Usage:  python verify_values.py [attempt.py ...]     (default: every attempt in MANIFEST.json)
Each (attempt, world size[, m / samples]) runs in fresh gloo processes (torch.multiprocessing, tcp://127.0.0.1,
free port), bounded by a timeout; hung or failed runs are killed and reported. Results go to stdout and to
verify_results.json next to this file.
"""
import datetime
import importlib.util
import json
import os
import socket
import sys
import tempfile
import time
import types

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_TIMEOUT = 14  # seconds per multi-process run
ONLY_WORLDS = [int(w) for w in os.environ.get("VERIFY_WORLDS", "").split(",") if w]  # optional filter


# --------------------------------------------------------------------------- stand-ins for the sandbox
def _mod(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


def install_fakes():
    """sandbox, sandbox.compat, sandbox.course.{data_parallel, sharding, tensor_parallel, pipeline}."""
    sandbox = _mod("sandbox")
    sandbox.__path__ = []

    def reduce_scatter_single(out, inp):
        dist.reduce_scatter_tensor(out, inp)

    def all_gather_single(out, inp):
        dist.all_gather_into_tensor(out, inp)

    import torch.distributed.nn.functional as dnf
    compat = _mod("sandbox.compat", reduce_scatter_single=reduce_scatter_single,
                  all_gather_single=all_gather_single, differentiable_all_reduce=dnf.all_reduce)
    course = _mod("sandbox.course")
    course.__path__ = []
    sandbox.compat, sandbox.course = compat, course
    course.data_parallel = _fake_dp()
    course.sharding = _fake_sh(compat)
    course.tensor_parallel = _fake_tp()
    course.pipeline = _fake_pp()


def _fake_dp():
    LR, STEPS, CAP_BYTES = 0.1, 3, 256

    class Net(nn.Module):  # parameters() order: head, extra, body (fits the lab's mismatch message)
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(16, 4)
            self.extra = nn.Linear(16, 4)
            self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU())

        def forward(self, x, hard):
            h = self.body(x)
            out = self.head(h)
            if bool(hard.any()):
                out = out + torch.where(hard[:, None], self.extra(h), torch.zeros_like(out))
            return out

    def make_model():
        torch.manual_seed(0)
        return Net()

    def batch(step):
        g = torch.Generator().manual_seed(100 + step)
        x, y = torch.randn(24, 8, generator=g), torch.randn(24, 4, generator=g)
        hard = torch.zeros(24, dtype=torch.bool)
        hard[-2:] = True
        return x, y, hard

    def local(step, rank, world):
        x, y, hard = batch(step)
        k = 24 // world
        s = slice(rank * k, (rank + 1) * k)
        return x[s], y[s], hard[s]

    def loss_fn(out, y):
        return F.mse_loss(out, y)

    def weights(model):
        return {k: v.detach().clone() for k, v in model.named_parameters()}

    state = {"in_backward": False, "overlapped_steps": 0, "calls_in_backward": 0}

    def train(cls):
        rank, world = dist.get_rank(), dist.get_world_size()
        model = make_model()
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        buckets = cls(model)
        for step in range(STEPS):
            x, y, hard = local(step, rank, world)
            opt.zero_grad()
            loss = loss_fn(model(x, hard), y)
            before = COUNTS.get("all_reduce", 0)
            state["in_backward"] = True
            loss.backward()
            state["in_backward"] = False
            if COUNTS.get("all_reduce", 0) > before:
                state["overlapped_steps"] += 1
            buckets.finish()
            opt.step()
        return weights(model)

    def reference():
        model = make_model()
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        for step in range(STEPS):
            x, y, hard = batch(step)
            opt.zero_grad()
            loss_fn(model(x, hard), y).backward()
            opt.step()
        return weights(model)

    return _mod("sandbox.course.data_parallel", LR=LR, STEPS=STEPS, CAP_BYTES=CAP_BYTES, make_model=make_model,
                local=local, loss_fn=loss_fn, weights=weights, train=train, reference=reference, state=state)


def _fake_sh(compat):
    LR, STEPS = 0.01, 3

    def make_model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))

    def batch(step):
        g = torch.Generator().manual_seed(200 + step)
        return torch.randn(24, 8, generator=g), torch.randn(24, 3, generator=g)

    def local(step, rank, world):
        x, y = batch(step)
        k = 24 // world
        return x[rank * k:(rank + 1) * k], y[rank * k:(rank + 1) * k]

    def loss_fn(out, y):
        return F.mse_loss(out, y)

    def weights(model):
        return {k: v.detach().clone() for k, v in model.named_parameters()}

    class ShardedLinear(nn.Module):
        def __init__(self, lin, function):
            super().__init__()
            self.function = function
            self.out_f, self.in_f = lin.weight.shape
            flat = torch.cat([lin.weight.detach().reshape(-1), lin.bias.detach()])
            self.n = flat.numel()
            self.world, rank = dist.get_world_size(), dist.get_rank()
            padded = self.padded(flat)
            k = padded.numel() // self.world
            self.shard = nn.Parameter(padded[rank * k:(rank + 1) * k].clone())

        def padded(self, v):
            return torch.cat([v, v.new_zeros((-v.numel()) % self.world)])

        def gather(self):
            full = torch.empty(self.shard.numel() * self.world)
            compat.all_gather_single(full, self.shard.detach().contiguous())
            w = full[:self.out_f * self.in_f].view(self.out_f, self.in_f)
            return w, full[self.out_f * self.in_f:self.n]

        def forward(self, x):
            return self.function.apply(x, self.shard, self)

    def fsdp(function):
        rank, world = dist.get_rank(), dist.get_world_size()
        model = make_model()
        names = [n for n, m in model.named_children() if isinstance(m, nn.Linear)]
        for n in names:
            setattr(model, n, ShardedLinear(getattr(model, n), function))
        adam = torch.optim.Adam([getattr(model, n).shard for n in names], lr=LR)
        for step in range(STEPS):
            x, y = local(step, rank, world)
            adam.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            adam.step()
        out = {}
        for n in names:
            w, b = getattr(model, n).gather()
            out[f"{n}.weight"], out[f"{n}.bias"] = w.clone(), b.clone()
        return out

    def reference():
        model = make_model()
        adam = torch.optim.Adam(model.parameters(), lr=LR)
        for step in range(STEPS):
            x, y = batch(step)
            adam.zero_grad()
            loss_fn(model(x), y).backward()
            adam.step()
        return weights(model)

    return _mod("sandbox.course.sharding", LR=LR, STEPS=STEPS, make_model=make_model, local=local,
                loss_fn=loss_fn, weights=weights, fsdp=fsdp, ShardedLinear=ShardedLinear, reference=reference)


def _fake_tp():
    def setup():
        return dist.get_rank(), dist.get_world_size()

    def weights():
        g = torch.Generator().manual_seed(300)
        return {"w1": torch.randn(16, 8, generator=g), "b1": torch.randn(16, generator=g),
                "w2": torch.randn(8, 16, generator=g), "b2": torch.randn(8, generator=g)}

    def batch():
        g = torch.Generator().manual_seed(301)
        return torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)

    def shard(rank, world):  # even where possible; 6/5/5 on 3 ranks (as tensor_split)
        bounds = [len(t) for t in torch.arange(16).tensor_split(world)]
        start = sum(bounds[:rank])
        return slice(start, start + bounds[rank])

    def loss_fn(y, target):
        return F.mse_loss(y, target)

    def reference(world):
        w = {k: v.clone().requires_grad_() for k, v in weights().items()}
        x, target = batch()
        x.requires_grad_()
        y = F.linear(F.gelu(F.linear(x, w["w1"], w["b1"])), w["w2"], w["b2"])
        loss_fn(y, target).backward()
        per_rank = []
        for r in range(world):
            s = shard(r, world)
            per_rank.append({"y": y.detach(), "grad_x": x.grad, "grad_w1": w["w1"].grad[s],
                             "grad_b1": w["b1"].grad[s], "grad_w2": w["w2"].grad[:, s], "grad_b2": w["b2"].grad})
        return per_rank

    return _mod("sandbox.course.tensor_parallel", setup=setup, weights=weights, batch=batch, shard=shard,
                loss_fn=loss_fn, reference=reference)


def _fake_pp():
    held = {"now": 0, "max": 0}

    def params(rank):
        g = torch.Generator().manual_seed(400 + rank)
        return {"w": (torch.randn(8, 8, generator=g) * 0.5).requires_grad_(),
                "b": (torch.randn(8, generator=g) * 0.1).requires_grad_()}

    def start():
        dist.barrier()
        return dist.get_rank(), dist.get_world_size(), params(dist.get_rank())

    def micro_batches(m):
        g = torch.Generator().manual_seed(401)
        x, t = torch.randn(16, 8, generator=g), torch.randn(16, 8, generator=g)
        return list(zip(x.tensor_split(m), t.tensor_split(m)))

    def forward(p, x):
        held["now"] += 1
        held["max"] = max(held["max"], held["now"])
        return torch.tanh(x @ p["w"].T + p["b"])

    def backward(y, grad=None):
        y.backward(grad)
        held["now"] -= 1

    def loss_of(y, target, m):
        return F.mse_loss(y, target) / m

    def finish(p):
        dist.barrier()
        return {"w": p["w"].grad, "b": p["b"].grad}

    def reference(world, m=None):
        ps = [params(r) for r in range(world)]
        x, t = micro_batches(1)[0]
        for p in ps:
            x = torch.tanh(x @ p["w"].T + p["b"])
        F.mse_loss(x, t).backward()
        return [{"w": p["w"].grad, "b": p["b"].grad} for p in ps]

    return _mod("sandbox.course.pipeline", start=start, micro_batches=micro_batches, forward=forward,
                backward=backward, loss_of=loss_of, finish=finish, reference=reference, held=held)


# --------------------------------------------------------------------------- call counting
COUNTS = {}
BYTES = {}
PEERS = set()


def install_counters():
    for name in ["send", "recv", "isend", "irecv", "all_reduce", "broadcast", "all_gather",
                 "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "reduce", "barrier"]:
        orig = getattr(dist, name)

        def wrapped(*a, _orig=orig, _name=name, **k):
            COUNTS[_name] = COUNTS.get(_name, 0) + 1
            t = a[0] if a and isinstance(a[0], torch.Tensor) else None
            if t is not None:
                BYTES[_name] = BYTES.get(_name, 0) + t.numel() * t.element_size()
            if _name in ("send", "isend"):
                PEERS.add(k.get("dst", a[1] if len(a) > 1 else None))
            return _orig(*a, **k)

        wrapped._orig = orig
        setattr(dist, name, wrapped)
    orig_p2p = dist.P2POp

    def p2pop(op, tensor, peer=None, *a, **k):  # count ops in batch_isend_irecv; unwrap for torch's identity check
        base = getattr(op, "_orig", op)
        nm = "isend" if base is dist.distributed_c10d.isend else "irecv"
        COUNTS[nm] = COUNTS.get(nm, 0) + 1
        BYTES[nm] = BYTES.get(nm, 0) + tensor.numel() * tensor.element_size()
        if nm == "isend":
            PEERS.add(peer)
        return orig_p2p(base, tensor, peer, *a, **k)

    dist.P2POp = p2pop


# --------------------------------------------------------------------------- per-lab drivers (run on every rank)
def load(path):
    spec = importlib.util.spec_from_file_location("attempt_" + os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def close(a, b, tol=1e-5):
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=tol, atol=tol)


def lab20(mod, rank, world, opts):
    res = {}
    for length in [int(v) for v in os.environ.get("VERIFY_LENGTHS", "10,3,17").split(",")]:
        dtype = torch.float64
        t = torch.tensor([(i + 1) * 10.0 ** rank for i in range(length)], dtype=dtype)
        want = sum(torch.tensor([(i + 1) * 10.0 ** r for i in range(length)], dtype=dtype) for r in range(world))
        out = mod.my_ring_all_reduce(t)
        res[f"len{length}"] = bool(close(out, want, 1e-9) and close(t, want, 1e-9))
    return res


def compare_dicts(got, want, tol=1e-5):
    return all(k in got and close(got[k], v, tol) for k, v in want.items())


def lab22(mod, rank, world, opts):
    dp = sys.modules["sandbox.course.data_parallel"]
    fn = mod.my_naive if hasattr(mod, "my_naive") else mod.my_bucketed
    out = {"values": compare_dicts(fn(), dp.reference())}
    if hasattr(mod, "MyBuckets"):
        out["steps_with_allreduce_during_backward"] = dp.state["overlapped_steps"]
    return out


def lab23(mod, rank, world, opts):
    sh = sys.modules["sandbox.course.sharding"]
    fn = mod.my_zero if hasattr(mod, "my_zero") else mod.my_fsdp
    return {"values": compare_dicts(fn(), sh.reference(), 1e-4)}


def lab24(mod, rank, world, opts):
    tp = sys.modules["sandbox.course.tensor_parallel"]
    want = tp.reference(world)[rank]
    if hasattr(mod, "my_mlp"):
        got = mod.my_mlp()
        return {k: bool(close(got.get(k), v, 1e-5)) for k, v in want.items()}
    got = mod.my_forward()
    return {"y": bool(close(got["y"], want["y"], 1e-5))}


def lab25(mod, rank, world, opts):
    pp = sys.modules["sandbox.course.pipeline"]
    m = opts["m"]
    fn = mod.my_gpipe if hasattr(mod, "my_gpipe") else mod.my_1f1b
    got = fn(m=m)
    want = pp.reference(world, m)[rank]
    return {"values": compare_dicts(got, want, 1e-5), "max_held": pp.held["max"]}


def lab26(mod, rank, world, opts):
    samples, every = opts["samples"], opts["eval_every"]
    got = mod.train(samples, every)
    refs = {}
    for kind in ("drop", "pad"):
        model = mod.make_model()
        opt = torch.optim.SGD(model.parameters(), lr=mod.LR)
        x, y = mod.dataset(samples)
        idx = list(range(samples))
        if kind == "drop":
            idx = idx[:samples // world * world]
        else:
            idx = idx + idx[:(-samples) % world]
        for k in range(len(idx) // world):
            b = idx[k * world:(k + 1) * world]
            opt.zero_grad()
            mod.loss_fn(model(x[b]), y[b]).backward()
            opt.step()
        refs[kind] = {k: v.detach() for k, v in model.state_dict().items()}
    return {"drop": compare_dicts(got, refs["drop"]), "pad": compare_dicts(got, refs["pad"])}


DRIVERS = {"20": lab20, "22": lab22, "23": lab23, "24": lab24, "25": lab25, "26": lab26}


def worker(rank, world, port, path, opts, outdir):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    import warnings
    warnings.filterwarnings("ignore")
    install_fakes()
    install_counters()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=RUN_TIMEOUT - 6))
    lab = os.path.basename(path)[3:5]
    try:
        res = {"ok": True, "result": DRIVERS[lab](load(path), rank, world, opts)}
    except Exception as e:  # noqa: BLE001
        res = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:200]}"}
    res["counts"], res["bytes"] = dict(COUNTS), dict(BYTES)
    res["send_peers"] = sorted(p for p in PEERS if p is not None)
    with open(os.path.join(outdir, f"{rank}.json"), "w") as f:
        json.dump(res, f)
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(path, world, opts):
    """One attempt on `world` ranks; returns per-rank results, or a hang / crash note."""
    with tempfile.TemporaryDirectory(prefix="bia-") as outdir:
        ctx = mp.start_processes(worker, args=(world, free_port(), path, opts, outdir), nprocs=world,
                                 join=False, start_method="spawn")
        deadline = time.time() + RUN_TIMEOUT
        done = False
        while time.time() < deadline:
            try:
                if ctx.join(timeout=1):
                    done = True
                    break
            except Exception:  # a rank died
                break
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
        for p in ctx.processes:
            p.join(5)
            if p.is_alive():
                p.kill()
        per_rank = {}
        for r in range(world):
            fn = os.path.join(outdir, f"{r}.json")
            if os.path.exists(fn):
                per_rank[r] = json.load(open(fn))
        return {"finished": done and len(per_rank) == world, "ranks": per_rank}


def all_true(d):
    if isinstance(d, dict):
        return all(all_true(v) for k, v in d.items() if k not in ("max_held", "steps_with_allreduce_during_backward"))
    return d is True


def summarize(res):
    """'right' if every rank finished and every comparison held; else 'wrong' / 'error' / 'hang'."""
    ranks = res["ranks"]
    if not res["finished"] and len(ranks) < len(ranks) + 1 and any(not r.get("ok", False) for r in ranks.values()):
        return "error"
    if not res["finished"]:
        return "hang/killed" if not ranks or all(r.get("ok") for r in ranks.values()) else "error"
    if not all(r["ok"] for r in ranks.values()):
        return "error"
    if all(all_true(r["result"]) for r in ranks.values()):
        return "right"
    if all(set(r["result"]) == {"drop", "pad"} and (r["result"]["drop"] or r["result"]["pad"])
           for r in ranks.values()):  # lab 26: either reference is accepted
        return "right"
    return "wrong"


PLAN = {  # which runs to make per lab: list of (world, opts)
    "20": [(w, {}) for w in (2, 3, 4, 5, 8)],
    "22": [(w, {}) for w in (1, 2, 3, 4, 8)],
    "23": [(w, {}) for w in (2, 3, 4, 8)],
    "24": [(w, {}) for w in (1, 2, 3, 4, 8)],
    "25": [(4, {"m": m}) for m in (1, 2, 4, 8)],
    "26": [(4, {"samples": 13, "eval_every": 2}), (4, {"samples": 13, "eval_every": 0}),
           (4, {"samples": 16, "eval_every": 2}), (3, {"samples": 13, "eval_every": 2}),
           (8, {"samples": 13, "eval_every": 2}), (2, {"samples": 13, "eval_every": 2})],
}


def main(argv):
    files = argv or [e["file"] for e in json.load(open(os.path.join(HERE, "MANIFEST.json")))]
    out_path = os.path.join(HERE, "verify_results.json")
    results = json.load(open(out_path)) if os.path.exists(out_path) else {}
    for f in files:
        path = os.path.join(HERE, os.path.basename(f))
        lab = os.path.basename(path)[3:5]
        entry = results.setdefault(os.path.basename(path), [])
        if not ONLY_WORLDS:
            entry.clear()
        for world, opts in PLAN[lab]:
            if ONLY_WORLDS and world not in ONLY_WORLDS:
                continue
            t0 = time.time()
            res = run(path, world, opts)
            verdict = summarize(res)
            r0 = res["ranks"].get(0, {})
            entry.append({"world": world, "opts": opts, "verdict": verdict, "rank0": r0.get("result"),
                          "error": next((r.get("error") for r in res["ranks"].values() if r.get("error")), None),
                          "rank0_counts": r0.get("counts"), "rank0_bytes": r0.get("bytes"),
                          "rank0_send_peers": r0.get("send_peers")})
            print(f"{os.path.basename(path):45s} N={world} {opts} -> {verdict} ({time.time() - t0:.1f}s)", flush=True)
        json.dump(results, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
