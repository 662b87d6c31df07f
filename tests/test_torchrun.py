"""Scale-out: the tracer under real torchrun (one node, and two "nodes" = two torchrun agents on this machine),
then `python -m sandbox.diagnose DIR` gives the verdict from the trace files alone."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT, leftovers, run_cli

EX = os.path.join(ROOT, "examples")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_started = []


@pytest.fixture(autouse=True)
def _end_torchruns():
    """Whatever a test's outcome, no torchrun agent or worker of it outlives it."""
    yield
    while _started:
        p = _started.pop()
        if p.poll() is None:
            _stop([p])


def _torchrun(trace_dir, script, nproc, nnodes=1, node_rank=0, port=None):
    args = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", f"--nnodes={nnodes}",
            f"--node-rank={node_rank}", "--master-addr=127.0.0.1", f"--master-port={port or _free_port()}",
            "-m", "sandbox.trace", "--trace-dir", str(trace_dir), script]
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    p = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    _started.append(p)
    return p


def _pending_ops(trace_dir, n):
    """{rank: op} of the call each rank is inside now, from its trace file."""
    out = {}
    for r in range(n):
        path = os.path.join(trace_dir, f"rank-{r}.jsonl")
        if not os.path.exists(path):
            continue
        opened = {}
        for line in open(path):
            e = json.loads(line)
            if e["ev"] == "enter":
                opened[e["id"]] = e["op"]
            elif e["ev"] == "exit":
                opened.pop(e["id"], None)
        if opened:
            out[r] = opened[max(opened)]
    return out


def _stop(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)  # what a user's Ctrl-C / a scheduler does to torchrun
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=10)


def _run_until_stuck(procs, trace_dir, n, ops, timeout=60):
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            pend = _pending_ops(trace_dir, n)
            if len(pend) == n and set(pend.values()) <= ops:
                time.sleep(0.3)
                return pend
            time.sleep(0.1)
        raise AssertionError(f"ranks never all blocked: {_pending_ops(trace_dir, n)}")
    finally:
        _stop(procs)


def test_one_node_ok(tmp_path):
    p = _torchrun(tmp_path, os.path.join(EX, "allreduce.py"), 3)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0, out
    q = run_cli("sandbox.diagnose", "--json", str(tmp_path))
    d = json.loads(q.stdout)
    assert q.returncode == 0 and d["verdict"] == "ok" and d["world_size"] == 3
    hello = json.loads(open(tmp_path / "rank-0.jsonl").readline())
    assert hello["launcher"] == "torchrun"
    assert leftovers() == []


def test_one_node_hang(tmp_path):
    p = _torchrun(tmp_path, os.path.join(EX, "mismatch.py"), 4)
    _run_until_stuck([p], tmp_path, 4, {"all_reduce", "broadcast"})
    q = run_cli("sandbox.diagnose", "--json", str(tmp_path))
    d = json.loads(q.stdout)
    assert q.returncode == 1
    assert (d["verdict"], d["diagnosis"]["kind"], d["diagnosis"]["culprit_ranks"]) == ("hang", "collective_mismatch", [2])
    # torchrun's SIGTERM left each rank's Python stack behind
    stack = open(tmp_path / "stack-2.txt").read()
    assert "mismatch.py" in stack, stack
    assert leftovers() == []


def test_a_worker_whose_peer_died_leaves_its_stack_where_its_call_failed(tmp_path):
    """torchrun ends its workers one after another (each in a session of its own), so a rank blocked on a peer that
    went first sees its call fail and leaves it before its own SIGTERM comes: the stack it leaves is the one taken
    when its call raised, at the line it was stuck on. Here rank 0 dies while rank 1 waits in recv from it. The
    barrier first: without it rank 0 could leave while rank 1 was still connecting in init_process_group, whose
    call then fails instead (gloo's init returns on each rank once its own pairs are made)."""
    script = tmp_path / "dies.py"
    script.write_text("import os\nimport torch\nimport torch.distributed as dist\n"
                      "dist.init_process_group('gloo')\n"
                      "dist.barrier()\n"
                      "if dist.get_rank() == 0:\n    os._exit(3)\n"
                      "dist.recv(torch.zeros(1), src=0)  # waits for rank 0\n")
    trace_dir = tmp_path / "traces"
    p = _torchrun(trace_dir, str(script), 2)
    out, _ = p.communicate(timeout=120)
    assert p.returncode != 0, out
    stack = open(trace_dir / "stack-1.txt").read()
    assert 'dies.py", line 8' in stack, f"stack-1.txt:\n{stack}\n--- torchrun's output:\n{out[-3000:]}"
    assert leftovers() == []


def test_two_nodes(tmp_path):
    port = _free_port()
    procs = [_torchrun(tmp_path, os.path.join(EX, "send_cycle.py"), 1, nnodes=2, node_rank=k, port=port)
             for k in (0, 1)]
    _run_until_stuck(procs, tmp_path, 2, {"send"})
    q = run_cli("sandbox.diagnose", "--json", str(tmp_path))
    d = json.loads(q.stdout)
    assert (d["verdict"], d["diagnosis"]["kind"], d["diagnosis"]["culprit_ranks"]) == ("hang", "p2p_cycle", [0, 1])
    groups = {json.loads(open(tmp_path / f"rank-{r}.jsonl").readline())["group_rank"] for r in (0, 1)}
    assert groups == {"0", "1"}  # one rank on each "node"
    assert leftovers() == []


def test_two_nodes_ok(tmp_path):
    port = _free_port()
    procs = [_torchrun(tmp_path, os.path.join(EX, "allreduce.py"), 2, nnodes=2, node_rank=k, port=port) for k in (0, 1)]
    outs = [""] * 2
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.2)
    for i, p in enumerate(procs):
        if p.poll() is None:
            _stop([p])
        outs[i] = p.stdout.read()
    assert [p.returncode for p in procs] == [0, 0], "\n---\n".join(outs)
    assert "".join(outs).count("sum over 4 ranks: [10.0, 10.0, 10.0, 10.0]") == 4
    d = json.loads(run_cli("sandbox.diagnose", "--json", str(tmp_path)).stdout)
    assert d["verdict"] == "ok" and d["world_size"] == 4
    assert {json.loads(open(tmp_path / f"rank-{r}.jsonl").readline())["group_rank"] for r in range(4)} == {"0", "1"}
