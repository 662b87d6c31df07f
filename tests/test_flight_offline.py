"""`python -m sandbox.diagnose DIR` on Flight Recorder dumps from a plain torchrun job: nothing of the sandbox in the
ranks, only the recorder switched on and its dumps written by `benchmarks/fr_dump.py` (on gloo torch never writes
them itself). Two jobs as a user writes them: DDP where rank 1 makes one extra step, and an all_reduce that rank 0
makes where rank 1 calls barrier(). The diagnosis must name the rank, the call and the user's line from the dumps
alone. Every torchrun job is bounded and ended with its workers (they run in sessions of their own). Last, the
CPU twin of the NCCL test in tests/test_gpu.py: a sandbox run's trace, edited as NCCL pairs the calls, diagnosed
from its directory."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from conftest import ROOT, leftovers, run_cli
from sandbox import flight
from sandbox.diagnose.__main__ import load_result
from sandbox.launcher import run_script

TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
FR_DUMP = os.path.join(ROOT, "benchmarks", "fr_dump.py")
FW = os.path.join(ROOT, "examples", "framework")
PREFIX = "job_dump_rank_"  # not torch's default: the tests also check --prefix
JOB_TIMEOUT_S = 240  # a job's limit: they take 10-40 s here, more on a loaded machine

UNEVEN = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3 + (rank == 1)):  # rank 1 has one batch more
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
del opt, model  # DDP's reducer before its process group: the other order can deadlock at exit (torch 2.13, gloo)
dist.destroy_process_group()
"""

CORRECT = UNEVEN.replace("range(3 + (rank == 1)):  # rank 1 has one batch more", "range(3):")  # every rank 3 steps

MET_BY_A_BARRIER = """\
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    dist.all_reduce(torch.ones(4))
else:
    dist.barrier()
time.sleep(600)
"""


def _site(name: str, text: str) -> str:
    """`examples/framework/<name>:<line>` of the one line of the example that holds `text`."""
    with open(os.path.join(FW, name)) as f:
        return f"examples/framework/{name}:{_line(f.read(), text)}"


def _line(source: str, text: str) -> int:
    hits = [i for i, line in enumerate(source.splitlines(), 1) if text in line]
    assert len(hits) == 1, hits
    return hits[0]


_jobs: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _end_jobs():
    """Whatever a test's outcome, no torchrun agent or worker of it outlives it."""
    yield
    while _jobs:
        _end(_jobs.pop())
    assert leftovers() == []


def _start(tmp_path, source: str) -> tuple[subprocess.Popen, str]:
    """torchrun --standalone --nproc-per-node 2 benchmarks/fr_dump.py train.py, in tmp_path, as a user runs it."""
    if not os.path.isfile(FR_DUMP):
        pytest.fail(f"{FR_DUMP} is missing: the runner that writes the dumps of a gloo job")
    (tmp_path / "train.py").write_text(source)
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    env = dict(os.environ, TORCH_FR_DUMP_TEMP_FILE=str(dumps / PREFIX), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    env.pop("PYTHONPATH", None)  # nothing of the sandbox in the ranks
    log = open(tmp_path / "torchrun.log", "w")
    p = subprocess.Popen([TORCHRUN, "--standalone", "--nproc-per-node", "2", FR_DUMP, "train.py"], cwd=tmp_path,
                         env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()  # the child holds its own copy
    _jobs.append(p)
    return p, str(dumps)


def _end(p: subprocess.Popen) -> None:
    """SIGTERM torchrun's process group (torchrun then ends its workers), SIGKILL whatever is left: its group and
    each worker's (torchrun starts them in sessions of their own)."""
    try:
        workers = [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
    except psutil.NoSuchProcess:  # torchrun already ended: it took its workers with it
        workers = []
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:  # it ended between the poll and the signal
            pass
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
    for pid in workers:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # gone already (the usual case): torchrun ended it
            pass


def _ops(path: str) -> list[str]:
    """The ops in a dump, or [] while it cannot be read yet (it is replaced whole, but may not exist yet)."""
    try:
        return [c["op"] for c in flight.calls(flight.load(path), 0)]
    except (flight.FlightError, OSError):
        return []


def _wait(cond, what: str, timeout: float = JOB_TIMEOUT_S, tmp_path=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    log = (tmp_path / "torchrun.log").read_text()[-3000:] if tmp_path else ""
    raise AssertionError(f"waited {timeout} s for {what}\n{log}")


def _diagnose(dumps: str):
    text = run_cli("sandbox.diagnose", "--prefix", PREFIX, dumps, env={"NO_COLOR": "1"})
    js = run_cli("sandbox.diagnose", "--json", "--prefix", PREFIX, dumps)
    assert js.stdout.strip(), js.stderr
    return text, js, json.loads(js.stdout)


# ------------------------------------------------------------------------------------------ DDP, one extra step

@pytest.fixture(scope="module")
def uneven_dumps(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("uneven")
    p, dumps = _start(tmp_path, UNEVEN)
    try:  # rank 0 finishes and leaves; rank 1's extra all_reduce then loses its peer and raises: the job ends
        p.wait(timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pass  # a rank still blocked: its dump, rewritten while it waits, holds the same calls
    finally:
        _end(p)
        _jobs.remove(p)
    assert sorted(flight.find(dumps, PREFIX)) == [0, 1], (tmp_path / "torchrun.log").read_text()[-3000:]
    return dumps


def test_a_torchrun_ddp_job_with_one_extra_step_is_named_from_its_dumps(uneven_dumps):
    backward = _line(UNEVEN, "loss.backward()")
    rank1 = flight.calls(flight.load(flight.find(uneven_dumps, PREFIX)[1]), 1)
    extra = [c for c in rank1 if c["op"] == "all_reduce"][-1]  # rank 1's fourth gradient all_reduce
    rank0 = flight.calls(flight.load(flight.find(uneven_dumps, PREFIX)[0]), 0)
    assert extra["seq"] > max(c["seq"] for c in rank0)  # rank 0 never made it: the dumps hold the cause
    text, js, j = _diagnose(uneven_dumps)
    assert js.returncode == text.returncode == 1, js.stdout + js.stderr
    d = j["diagnosis"]
    assert (d["kind"], d["culprit_ranks"], d["op"], d["seq"], d["group"]) == (
        "uneven_steps", [1], "all_reduce", extra["seq"], [0, 1]), d
    assert d["site"].endswith(f"train.py:{backward}"), d
    assert d["details"]["gradient_all_reduces"] == {"0": 3, "1": 4}, d["details"]
    assert "Rank 1 ran more training steps than rank 0" in d["summary"], d["summary"]
    assert f"rank 1's all_reduce #{extra['seq']} of group [0, 1]" in d["summary"], d["summary"]
    assert "model.join()" in d["summary"], d["summary"]
    first = text.stdout.splitlines()[0]
    assert first.split(" [")[0] in ("HANG", "ERROR") and "[uneven_steps]" in first, text.stdout
    assert f"train.py:{backward}" in text.stdout, text.stdout


def test_calls_reads_the_frames_of_a_torchrun_dump(uneven_dumps):
    """A dump with the calls' Python frames (the runner keeps them): each call's user line and the framework call it
    was made under; nothing in the job went through the sandbox's tracer."""
    cs = flight.calls(flight.load(flight.find(uneven_dumps, PREFIX)[1]), 1)
    backward, built = _line(UNEVEN, "loss.backward()"), _line(UNEVEN, "model = DDP(")
    reduces = [c for c in cs if c["op"] == "all_reduce"]
    assert len(reduces) == 4, cs
    for c in reduces:
        assert (c["shapes"], c["dtypes"], c["via"], c["traced"]) == ([[9]], ["float32"], "backward()", False), c
        assert c["site"].endswith(f"train.py:{backward}"), c
    made = [c for c in cs if c["via"] == "DistributedDataParallel(...)"]
    assert made and all(c["site"].endswith(f"train.py:{built}") and c["traced"] is False for c in made), cs


SETTLING = """\
import pickle
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, BENCHMARKS)
from fr_dump import SETTLE_S, Dumper

def behind(data):  # what sandbox.diagnose reads: the last all_reduce's entry not yet retired
    return not pickle.loads(data)["entries"][-1]["retired"]

dist.init_process_group("gloo")
at_once = settled = 0
for _ in range(40):
    dist.all_reduce(torch.ones(9))
    at_once += behind(Dumper._snapshot(0.0))
    dist.all_reduce(torch.ones(9))
    settled += behind(Dumper._snapshot(SETTLE_S))
print(f"rank {dist.get_rank()}: behind at once {at_once} of 40, settled {settled} of 40", flush=True)
dist.destroy_process_group()
"""


def test_a_deliberate_dump_waits_for_the_recorder_to_mark_the_last_collective_completed(tmp_path):
    """On gloo a call's entry is retired by the group's worker thread just after the caller's wait returns, so a dump
    taken at once may show a finished all_reduce as still running (a correct DDP job then read as hung in its last
    collective). The runner's dumps at destroy_process_group and at the end wait for it (fr_dump.SETTLE_S)."""
    p, _ = _start(tmp_path, SETTLING.replace("BENCHMARKS", repr(os.path.dirname(FR_DUMP))))
    assert p.wait(timeout=JOB_TIMEOUT_S) == 0, (tmp_path / "torchrun.log").read_text()[-3000:]
    said = re.findall(r"rank (\d): behind at once (\d+) of 40, settled (\d+) of 40", (tmp_path / "torchrun.log").read_text())
    assert sorted(r for r, _, _ in said) == ["0", "1"], (tmp_path / "torchrun.log").read_text()[-3000:]
    assert all(settled == "0" for _, _, settled in said), said


def _fr_dump():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fr_dump", FR_DUMP)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_dump_behind_the_one_written_never_replaces_it():
    """What a rank of a correct DDP job wrote, 1 run in about 20 under load: at destroy_process_group all 8
    all_reduces completed; at the script's end, the group destroyed, the completed count read 7. Written last, that
    dump made the job read as hung in its last collective. An older snapshot reaching the file late is the same."""
    fr = _fr_dump()
    at_destroy = {"entries": 8, "groups": {"0": (8, 8)}}
    assert fr.behind({"entries": 8, "groups": {"0": (8, 7)}}, at_destroy)  # gone back: kept out
    assert fr.behind({"entries": 7, "groups": {"0": (7, 7)}}, at_destroy)  # an older snapshot: kept out
    assert fr.behind({"entries": 8, "groups": {}}, at_destroy)  # the group gone, nothing new
    assert not fr.behind(at_destroy, at_destroy)
    assert not fr.behind({"entries": 9, "groups": {"0": (9, 8)}}, at_destroy)  # a new call: written
    assert not fr.behind({"entries": 8, "groups": {"0": (8, 8), "1": (0, 0)}}, at_destroy)  # a new group: written
    assert not fr.behind({"entries": 8, "groups": {"0": (8, 8)}}, {"entries": 8, "groups": {"0": (8, 7)}})
    # the count gone back as gloo's two worker threads leave it, but one more entry retired: written
    assert not fr.behind({"entries": 8, "retired": 8, "groups": {"0": (8, 7)}},
                         {"entries": 8, "retired": 7, "groups": {"0": (8, 8)}})


def test_a_correct_torchrun_ddp_job_gives_no_alarm_from_its_dumps(tmp_path):
    assert CORRECT != UNEVEN  # the one change made it
    p, dumps = _start(tmp_path, CORRECT)
    assert p.wait(timeout=JOB_TIMEOUT_S) == 0, (tmp_path / "torchrun.log").read_text()[-3000:]
    text, js, j = _diagnose(dumps)
    assert js.returncode == text.returncode == 0, js.stdout + js.stderr
    assert (j["verdict"], j["world_size"], j["diagnosis"]["kind"], j["warnings"]) == ("ok", 2, "none", []), j


# ------------------------------------------------------------------------------------------ all_reduce vs barrier

@pytest.fixture(scope="module")
def barrier_dumps(tmp_path_factory):
    """The dumps of a stuck job: rank 0 in all_reduce #1, rank 1 in barrier #1; the job ended once both hold them."""
    tmp_path = tmp_path_factory.mktemp("barrier")
    p, dumps = _start(tmp_path, MET_BY_A_BARRIER)
    try:
        paths = [os.path.join(dumps, f"{PREFIX}{r}") for r in (0, 1)]
        # both ranks are blocked in their calls: the runner rewrites each dump every 0.5 s; wait until both hold them
        _wait(lambda: "all_reduce" in _ops(paths[0]) and "barrier" in _ops(paths[1]), "both ranks' dumps",
              tmp_path=tmp_path)
        assert p.poll() is None  # the job is stuck, as a user's would be
    finally:
        _end(p)
        _jobs.remove(p)
    return dumps


REDUCE_AT, BARRIER_AT = _line(MET_BY_A_BARRIER, "dist.all_reduce("), _line(MET_BY_A_BARRIER, "dist.barrier()")


def test_an_all_reduce_met_by_a_barrier_is_named_from_the_dumps_of_a_stuck_job(barrier_dumps):
    text, js, j = _diagnose(barrier_dumps)
    assert js.returncode == text.returncode == 1, js.stdout + js.stderr
    d = j["diagnosis"]
    assert (j["verdict"], d["kind"], d["seq"], d["group"]) == ("hang", "collective_mismatch", 1, [0, 1]), d
    assert len(d["culprit_ranks"]) == 1 and d["culprit_ranks"][0] in (0, 1), d  # two ranks: one is the odd one
    assert d["details"]["calls"] == {"0": "all_reduce #1 of group [0, 1] shape [4] float32",
                                     "1": "barrier #1 of group [0, 1]"}, d["details"]
    assert "rank 0 calls all_reduce(shape [4], float32) at " in d["summary"], d["summary"]
    assert f"train.py:{REDUCE_AT}; rank 1 calls barrier() at " in d["summary"], d["summary"]
    assert f"train.py:{BARRIER_AT}." in d["summary"], d["summary"]
    r0, r1 = j["ranks"]
    assert (r0["pending"]["op"], r0["pending"]["seq"]) == ("all_reduce", 1) and \
        r0["pending"]["site"].endswith(f"train.py:{REDUCE_AT}"), r0
    assert (r1["pending"]["op"], r1["pending"]["seq"]) == ("barrier", 1), r1
    assert text.stdout.startswith("HANG [collective_mismatch]"), text.stdout


def test_a_rank_without_a_dump_is_said_to_be_missing(barrier_dumps, tmp_path):
    """Only rank 0's dump (as on NCCL, where only the rank whose watchdog fired writes one): the diagnosis is made
    from it, names where rank 0 waits, and says rank 1 left none."""
    (tmp_path / f"{PREFIX}0").write_bytes(open(os.path.join(barrier_dumps, f"{PREFIX}0"), "rb").read())
    _, js, j = _diagnose(str(tmp_path))
    assert js.returncode == 1 and j["verdict"] == "hang" and j["world_size"] == 2, js.stdout + js.stderr
    said = j["diagnosis"]["summary"]
    assert "Rank 1 left no dump" in said or "rank 1 is without a Flight Recorder dump" in said, said
    r0 = j["ranks"][0]
    assert (r0["outcome"], r0["pending"]["op"], r0["pending"]["seq"]) == ("hung", "all_reduce", 1), r0
    assert r0["pending"]["site"].endswith(f"train.py:{REDUCE_AT}"), r0


# ------------------------------------------------------------------------------------------ NCCL's pairing, on CPU

def test_nccls_pairing_of_an_extra_all_reduce_with_a_barrier_names_the_earlier_call_and_rank_0(tmp_path, clean):
    """What tests/test_gpu.py checks on 2 GPUs, here from a real gloo run's trace of extra_allreduce.py edited as
    NCCL pairs the calls (its barrier is a one-element all_reduce): rank 0's all_reduce #2 and rank 1's barrier #2
    complete against each other, rank 1 finishes, rank 0 waits in barrier #3. The root is call #2, and the rank to
    name is rank 0, which made the call rank 1 did not (through `if rank == 0:`)."""
    gloo = tmp_path / "gloo"
    res = run_script(os.path.join(FW, "extra_allreduce.py"), world_size=2, trace_dir=str(gloo),
                     timeout=JOB_TIMEOUT_S)
    assert res.verdict == "hang" and res.diagnosis.seq == 2, res.diagnosis.summary  # on gloo both wait in call #2
    extra, barrier = _site("extra_allreduce.py", "# BUG"), _site("extra_allreduce.py", "dist.barrier()")
    nccl = tmp_path / "nccl"
    nccl.mkdir()
    (nccl / "meta.json").write_bytes((gloo / "meta.json").read_bytes())
    for r in (0, 1):
        evs = [json.loads(line) for line in (gloo / f"rank-{r}.jsonl").read_text().splitlines()]
        for e in evs:
            if e.get("op") == "init_process_group" and e["ev"] == "enter":
                e["backend"], e["device_id"] = "nccl", f"cuda:{r}"
            if "devices" in e:
                e["devices"] = [f"cuda:{r}"]
        [second] = [e for e in evs if e["ev"] == "enter" and e.get("seq") == 2]  # inside it when the run ended
        assert second["op"] == ("all_reduce" if r == 0 else "barrier") and not any(
            e["ev"] == "exit" and e["id"] == second["id"] for e in evs), evs
        t, nxt = evs[-1]["t"], second["id"] + 1
        if r == 0:  # NCCL's all_reduce returns once enqueued; the tracer's watcher says when the GPU finished it
            evs += [{"ev": "exit", "rank": 0, "id": second["id"], "op": "all_reduce", "t": t + 1e-4, "inflight": True},
                    {"ev": "done", "rank": 0, "id": second["id"], "t": t + 1.5e-4}]
        else:  # a barrier waits for the device
            evs.append({"ev": "exit", "rank": 1, "id": second["id"], "op": "barrier", "t": t + 1e-4})
        if r == 0:
            evs.append({"ev": "enter", "rank": 0, "id": nxt, "t": t + 2e-4, "seq": 3, "op": "barrier",
                        "site": barrier, "func": "<module>", "gname": "0", "group": [0, 1]})
        else:
            evs += [{"ev": "enter", "rank": 1, "id": nxt, "t": t + 2e-4, "op": "destroy_process_group",
                     "site": _site("extra_allreduce.py", "destroy_process_group"), "func": "<module>"},
                    {"ev": "exit", "rank": 1, "id": nxt, "op": "destroy_process_group", "t": t + 3e-4},
                    {"ev": "end", "rank": 1, "outcome": "ok", "exit_code": 0, "t": t + 4e-4}]
        (nccl / f"rank-{r}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evs))
    off = load_result(str(nccl))
    d = off.diagnosis
    assert off.verdict == "hang" and (d.op, d.seq) == ("barrier", 3), d.summary
    assert d.summary.startswith("The cause comes earlier: Call #2 of group [0, 1] completed but was not the same "
                                "call on every rank: "), d.summary
    assert f"rank 0 called all_reduce(shape [4], float32, SUM) at {extra}" in d.summary, d.summary
    assert f"rank 1 called barrier() at {barrier}" in d.summary, d.summary
    assert d.details["root"] == {"seq": 2, "op": "all_reduce"}, d.details
    assert d.culprit_ranks == [0], d
