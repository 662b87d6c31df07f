"""`--launcher torchrun` (sandbox.agents): PyTorch's own elastic agent on every simulated node, rendezvous and restarts
its own, the tracer in its workers; faults injected from outside the nodes; nothing left after any ending, SIGKILL of
the launcher included. Needs root (network namespaces); skipped with the reason elsewhere."""
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from conftest import ROOT, still_running, wait_for
from sandbox import faults, nodes
from test_multinode import T, sandbox_run

OK, WHY = nodes.available()
pytestmark = pytest.mark.skipif(not OK, reason=WHY)

WHERE = """
import os, socket
import torch, torch.distributed as dist
dist.init_process_group("gloo")
h = socket.gethostname()
print("WHERE", h, socket.gethostbyname(h), os.environ["RANK"], os.environ["LOCAL_RANK"], os.environ["GROUP_RANK"],
      os.environ["WORLD_SIZE"], os.environ["TORCHELASTIC_RUN_ID"], flush=True)
t = torch.ones(1)
dist.all_reduce(t)
print("SUM", int(t.item()), flush=True)
dist.destroy_process_group()
"""

# Trains 12 steps; rank 0 keeps a checkpoint of the step reached, and a restarted worker resumes after it.
TRAIN = """
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
ckpt = os.path.join(sys.argv[1], "state.pt")
start = torch.load(ckpt)["step"] + 1 if os.path.exists(ckpt) else 0
print("START", start, os.environ["TORCHELASTIC_RESTART_COUNT"], flush=True)
total = torch.zeros(1)
for step in range(start, 12):
    t = torch.ones(1)
    dist.all_reduce(t)
    if rank == 0:
        torch.save({"step": step}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
    time.sleep(0.1)
print("DONE", flush=True)
dist.destroy_process_group()
"""


def test_two_nodes_of_two_ranks_each_under_torchrun(clean, tmp_path):
    script = tmp_path / "where.py"
    script.write_text(WHERE)
    p, out, err = sandbox_run("--launcher", "torchrun", "--nnodes", "2", "--nproc-per-node", "2", "--json", str(script))
    assert p.returncode == 0, err
    d = json.loads(out)
    assert d["verdict"] == "ok" and d["world_size"] == 4
    seen = {}
    for r in d["ranks"]:
        where = [line.split()[1:] for line in r["output"].splitlines() if line.startswith("WHERE ")]
        assert len(where) == 1, r["output"]
        host, addr, rank, local, group, ws, run_id = where[0]
        seen[int(rank)] = (host, addr, int(local), int(group))
        assert ws == "4" and "SUM 4" in r["output"] and r["host"] == host
    # torchrun's rendezvous put ranks 0-1 on node0 and 2-3 on node1, local ranks 0-1 on each
    assert [(h, lr, g) for h, _, lr, g in (seen[r] for r in range(4))] == \
        [("node0", 0, 0), ("node0", 1, 0), ("node1", 0, 1), ("node1", 1, 1)]
    assert seen[0][1] == seen[1][1] != seen[2][1] == seen[3][1] and not seen[0][1].startswith("127.")
    assert nodes.leftovers(p.pid) == []


def train(tmp_path, *args) -> tuple[subprocess.Popen, dict, str]:
    script, ckpt, trace = tmp_path / "train.py", tmp_path / "ckpt", tmp_path / "trace"
    script.write_text(TRAIN)
    ckpt.mkdir()
    p, out, err = sandbox_run("--launcher", "torchrun", "--nnodes", "2", "--nproc-per-node", "2", "--json",
                              "--trace-dir", str(trace), *args, str(script), str(ckpt))
    return p, json.loads(out), str(trace)


@pytest.mark.slow
def test_a_node_killed_under_max_restarts_1_restarts_and_finishes(clean, tmp_path):
    p, d, trace = train(tmp_path, "--max-restarts", "1", "--kill-node", "1@rank2:6")
    assert p.returncode == 0 and d["verdict"] == "ok", d["diagnosis"]
    text = d["diagnosis"]["summary"]
    # call 6, or a later one if rank 2 got past it before the sandbox's next look at the traces
    assert re.search(r"Node1 was killed when rank 2 \(node1\) entered its call ([6-9]|1[01]) \(3 processes\): its "
                     r"torchrun agent and its workers; it came back with a fresh agent\.", text), text
    assert f"The workers were restarted 1 time by torchrun (--max-restarts 1); this report is the last attempt's, the " \
           f"earlier ones' traces are in {trace}/attempts/." in text
    # the last attempt resumed from the checkpoint and finished on every rank; the first is kept beside it
    for r in d["ranks"]:
        starts = [line.split() for line in r["output"].splitlines() if line.startswith("START")]
        assert len(starts) == 1 and int(starts[0][1]) > 0, r["output"]
        assert "DONE" in r["output"]
    assert sorted(os.listdir(os.path.join(trace, "attempts"))) == ["0"]
    assert {f"rank-{r}.jsonl" for r in range(4)} <= set(os.listdir(os.path.join(trace, "attempts", "0")))
    assert nodes.leftovers(p.pid) == []


@pytest.mark.slow
def test_a_node_killed_without_restarts_fails_and_the_dead_node_is_named(clean, tmp_path):
    p, d, _ = train(tmp_path, "--kill-node", "1@rank2:6")
    assert p.returncode == 1 and d["verdict"] in ("crash", "error")
    diag = d["diagnosis"]
    assert (diag["kind"], diag["culprit_ranks"], diag["details"]["node"]) == ("node_failure", [2, 3], "node1"), diag
    assert re.match(r"Node1 died: killed when rank 2 \(node1\) entered its call ([6-9]|1[01]), taking ranks 2 and 3 "
                    r"\(node1\) with it, and the job could not go on without them", diag["summary"]), diag["summary"]
    assert "With --max-restarts 0 torchrun does not restart the workers" in diag["summary"]
    assert nodes.leftovers(p.pid) == []


def test_a_sigkilled_launcher_takes_torchruns_agents_and_workers_with_it(clean, tmp_path):
    script = tmp_path / "wait.py"
    script.write_text("import os, time\nprint('started', os.getpid(), flush=True)\ntime.sleep(300)\n")
    trace = tmp_path / "trace"

    def pids():
        logs = [trace / f"rank-{r}.log" for r in range(4)]
        said = [f.read_text().split() if f.exists() else [] for f in logs]
        return [int(s[s.index("started") + 1]) for s in said] if all("started" in s for s in said) else None
    p = subprocess.Popen([sys.executable, "-m", "sandbox.run", "--launcher", "torchrun", "--nnodes", "2",
                          "--nproc-per-node", "2", "--trace-dir", str(trace), str(script)], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        workers = wait_for(pids, "torchrun's workers to start", timeout=T)
        inside = [int(x) for x in subprocess.run(["ip", "netns", "pids", f"dsbx-{p.pid}-" + _slot(p.pid) + "-n0"],
                                                  capture_output=True, text=True, timeout=T).stdout.split()]
        assert len(inside) >= 3  # node0's agent and its two workers
    finally:
        p.kill()
        p.wait(timeout=T)
    # the agents die with the launcher (PR_SET_PDEATHSIG), their workers (sessions of their own) by themselves
    assert still_running(workers + inside, grace=10) == []
    nodes.cleanup_stale()
    assert nodes.leftovers(p.pid) == []


def _slot(owner: int) -> str:
    return next(x.split()[1].split("-")[2] for x in nodes.leftovers(owner) if x.startswith("netns "))


def test_ctrl_c_under_torchrun_leaves_nothing(clean, tmp_path):
    script = tmp_path / "wait.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(300)\n")
    trace = tmp_path / "trace"
    ready = (lambda: all((trace / f"rank-{r}.log").exists() and "started" in (trace / f"rank-{r}.log").read_text()
                         for r in range(2)))
    p, out, err = sandbox_run("--launcher", "torchrun", "--nnodes", "2", "--trace-dir", str(trace), str(script),
                              signal_after=(signal.SIGINT, ready))
    assert p.returncode == 130, err
    assert "INTERRUPTED" in out
    # the workers it ended were stopped, as under the sandbox's own launcher (once: crashed, from their files alone)
    assert re.search(r"^0 \(node0\)\s+stopped\b", out, re.M) and re.search(r"^1 \(node1\)\s+stopped\b", out, re.M), out
    assert nodes.leftovers(p.pid) == []


@pytest.mark.parametrize("args, says", [
    (["--launcher", "torchrun", "-n", "2"], "give --nnodes 2 or more"),
    (["--nnodes", "2", "--max-restarts", "1"], "it needs --launcher torchrun"),
    (["-n", "2", "--kill-node", "1@3s"], "give --nnodes 2 or more"),
    (["--launcher", "torchrun", "--nnodes", "2", "--kill-node", "1@soon"], "a --kill-node fault reads NODE@3s"),
    (["--launcher", "torchrun", "--nnodes", "2", "--link-down", "1@3s"], "NODE@3s+5s"),
    (["--launcher", "torchrun", "--nnodes", "2", "--kill-node", "2@3s"], "--kill-node names node 2, and this run has nodes 0-1"),
    (["--nnodes", "2", "--cap", "fast"], "a link rate is a number and a unit"),
])
def test_bad_launcher_and_fault_options_are_one_sentence_and_exit_2(tmp_path, args, says):
    script = tmp_path / "ok.py"
    script.write_text("print('never runs')\n")
    p, out, err = sandbox_run(*args, str(script))
    assert p.returncode == 2 and says in err and len(err.strip().splitlines()) == 1, err
    assert "never runs" not in out


@pytest.mark.parametrize("kind, text, fault", [
    ("kill", "1@3s", faults.Fault(kind="kill", node=1, at_s=3.0)),
    ("kill", "0@rank3:12", faults.Fault(kind="kill", node=0, at_call=(3, 12))),
    ("link-down", "1@2.5s+4s", faults.Fault(kind="link-down", node=1, at_s=2.5, for_s=4.0)),
])
def test_fault_forms(kind, text, fault):
    assert faults.parse(kind, text) == fault


def test_a_mismatch_under_torchrun_is_named_with_each_ranks_stack(clean):
    p, out, err = sandbox_run("--launcher", "torchrun", "--nnodes", "2", "--nproc-per-node", "2", "--json", "-v",
                              os.path.join(ROOT, "examples", "mismatch.py"))
    assert p.returncode == 1, err
    d = json.loads(out)
    assert (d["verdict"], d["diagnosis"]["kind"], d["diagnosis"]["culprit_ranks"]) == ("hang", "collective_mismatch", [2])
    assert "rank 2 (node1) calls broadcast" in d["diagnosis"]["summary"]
    # the sandbox asked every hung worker for its Python stack before ending the nodes
    assert all("mismatch.py" in (r["stack"] or "") for r in d["ranks"]), [r["stack"] for r in d["ranks"]]
    # a deadlock the traces prove is confirmed before it is named, as under the sandbox's own launcher: the stacks
    # taken, the workers still in the same calls (the torchrun launcher once named it at once)
    assert "provable deadlock" in err and "confirming while the stacks are taken" in err, err
    assert err.index("confirming while the stacks are taken") < err.index("stopping the run: provable deadlock")
    assert nodes.leftovers(p.pid) == []



def test_ddps_cpp_all_reduce_is_seen_under_torchrun_through_the_flight_recorder(clean):
    # examples/framework/ddp_uneven.py: rank 3 runs a 4th step; its gradient all_reduce is made in DDP's C++ reducer,
    # which only the workers' Flight Recorders see (the sandbox asks them for dumps when the traces go quiet)
    p, out, err = sandbox_run("--launcher", "torchrun", "--nnodes", "2", "--nproc-per-node", "2", "--json",
                              os.path.join(ROOT, "examples", "framework", "ddp_uneven.py"))
    assert p.returncode == 1, err
    d = json.loads(out)
    assert (d["diagnosis"]["kind"], d["diagnosis"]["culprit_ranks"]) == ("uneven_steps", [3]), d["diagnosis"]
    assert nodes.leftovers(p.pid) == []
