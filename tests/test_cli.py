"""`python -m sandbox.run` as a user runs it: the JSON contract, torchrun's environment, exit codes, bad input."""
import json
import os
import sys

import pytest

from conftest import ROOT, run_cli

EX = os.path.join(ROOT, "examples")


def _json(proc):
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def test_ok_run_json_contract(clean):
    p = run_cli("sandbox.run", "-n", "4", "--json", os.path.join(EX, "allreduce.py"))
    assert p.returncode == 0, p.stderr
    d = _json(p)
    assert d["verdict"] == "ok" and d["world_size"] == 4 and d["wall_s"] > 0
    assert set(d["diagnosis"]) >= {"kind", "summary", "culprit_ranks", "op", "group", "seq"}
    assert d["diagnosis"]["kind"] == "none"
    assert [r["rank"] for r in d["ranks"]] == [0, 1, 2, 3]
    for r in d["ranks"]:
        assert set(r) >= {"rank", "outcome", "exit_code", "pending", "error"}
        assert (r["outcome"], r["exit_code"], r["pending"], r["error"]) == ("ok", 0, None, None)
        assert "sum over 4 ranks: [10.0, 10.0, 10.0, 10.0]" in r["output"]


def test_mismatch_json_and_exit_code(clean):
    p = run_cli("sandbox.run", "-n", "4", "--json", os.path.join(EX, "mismatch.py"))
    assert p.returncode == 1
    d = _json(p)
    assert (d["verdict"], d["diagnosis"]["kind"], d["diagnosis"]["culprit_ranks"]) == ("hang", "collective_mismatch", [2])
    assert (d["diagnosis"]["op"], d["diagnosis"]["group"], d["diagnosis"]["seq"]) == ("broadcast", [0, 1, 2, 3], 1)
    r2 = d["ranks"][2]
    assert r2["outcome"] == "hung"
    assert r2["pending"]["op"] == "broadcast" and r2["pending"]["seq"] == 1
    assert r2["pending"]["site"].endswith("mismatch.py:9")
    assert d["ranks"][0]["pending"]["op"] == "all_reduce"


def test_terminal_report_order(clean):
    p = run_cli("sandbox.run", "-n", "2", os.path.join(EX, "send_cycle.py"), env={"NO_COLOR": "1"})
    assert p.returncode == 1
    lines = p.stdout.splitlines()
    assert lines[0].startswith("HANG [p2p_cycle]: 2 ranks in")
    assert "\x1b[" not in p.stdout  # NO_COLOR honoured
    text = p.stdout
    assert text.index("outcome") < text.index("Point-to-point cycle") 


def test_torchrun_environment_and_args(tmp_path, clean):
    script = tmp_path / "env.py"
    script.write_text(
        "import json, os, sys\n"
        "keys = ['RANK','LOCAL_RANK','WORLD_SIZE','LOCAL_WORLD_SIZE','MASTER_ADDR','MASTER_PORT','GROUP_RANK',"
        "'ROLE_RANK','TORCHELASTIC_RUN_ID','TORCHELASTIC_RESTART_COUNT']\n"
        "print('ENV', json.dumps({k: os.environ.get(k) for k in keys}), json.dumps(sys.argv[1:]))\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo'); dist.barrier(); dist.destroy_process_group()\n")
    p = run_cli("sandbox.run", "-n", "3", "--json", str(script), "--lr", "0.1", "-x")
    d = _json(p)
    assert d["verdict"] == "ok", d["diagnosis"]
    ports = set()
    for r in d["ranks"]:
        line = next(l for l in r["output"].splitlines() if l.startswith("ENV "))
        split = line.rindex("} ") + 1  # "ENV {...} [...]": the environment, then the script's arguments
        env, args = json.loads(line[4:split]), line[split + 1:]
        assert json.loads(args) == ["--lr", "0.1", "-x"]
        n = r["rank"]
        assert env["RANK"] == env["LOCAL_RANK"] == env["ROLE_RANK"] == str(n)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == "3"
        assert env["GROUP_RANK"] == "0" and env["MASTER_ADDR"] == "127.0.0.1"
        assert env["TORCHELASTIC_RESTART_COUNT"] == "0" and env["TORCHELASTIC_RUN_ID"]
        ports.add(env["MASTER_PORT"])
    assert len(ports) == 1 and int(ports.pop()) > 0


def test_module_mode(tmp_path, clean):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text("import torch.distributed as dist\nimport sys\n"
                                  "dist.init_process_group('gloo'); dist.barrier()\nprint('args', sys.argv[1:])\n")
    p = run_cli("sandbox.run", "-n", "2", "--json", "-m", "mypkg.train", "a", "b", cwd=str(tmp_path))
    d = _json(p)
    assert d["verdict"] == "ok", d
    assert "args ['a', 'b']" in d["ranks"][1]["output"]


def test_timeline_and_trace_dir(tmp_path, clean):
    png, traces = tmp_path / "t.png", tmp_path / "traces"
    p = run_cli("sandbox.run", "-n", "2", "--timeline", str(png), "--trace-dir", str(traces),
                os.path.join(EX, "send_cycle.py"))
    assert p.returncode == 1
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert set(os.listdir(traces)) >= {"rank-0.jsonl", "rank-0.log", "rank-1.jsonl", "rank-1.log",
                                       "stack-0.txt", "stack-1.txt"}
    # the kept traces give the same verdict offline
    q = run_cli("sandbox.diagnose", "--json", str(traces))
    d = json.loads(q.stdout)
    assert (d["verdict"], d["diagnosis"]["kind"]) == ("hang", "p2p_cycle")


BAD = [
    (["-n", "4", "no/such/script.py"], "no such script"),
    (["-n", "0", "x.py"], "must be a finite number greater than 0"),
    (["-n", "100000", "EX/allreduce.py"], "at most 128"),
    (["-n", "abc", "x.py"], "is not a number"),
    (["--timeout", "-3", "x.py"], "must be a finite number greater than 0"),
    (["--hang-after", "0", "x.py"], "must be a finite number greater than 0"),
    (["--timeout", "nan", "x.py"], "must be a finite number greater than 0"),
    ([], "give a script"),
    (["--timeline", "out.txt", "EX/allreduce.py"], "--timeline wants"),
]


@pytest.mark.parametrize("args,says", BAD, ids=[" ".join(a) or "nothing" for a, _ in BAD])
def test_bad_input_is_one_sentence_exit_2(args, says, clean):
    args = [a.replace("EX/", EX + "/") for a in args]
    p = run_cli("sandbox.run", *args)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert says in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_gpu_without_gpu_is_a_usage_error(clean):
    p = run_cli("sandbox.run", "-n", "2", "--gpu", os.path.join(EX, "allreduce.py"))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "GPU" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_script_failing_at_import_is_the_jobs_failure(tmp_path, clean):
    script = tmp_path / "broken.py"
    script.write_text("import torch\nimport no_such_module_here\n")
    p = run_cli("sandbox.run", "-n", "2", "--json", str(script))
    assert p.returncode == 1
    d = _json(p)
    assert d["verdict"] == "error" and d["diagnosis"]["kind"] == "rank_error"
    assert "No module named 'no_such_module_here'" in d["diagnosis"]["summary"]
    assert "Traceback" in d["ranks"][0]["output"]  # the job's own traceback, shown as the job's output
    assert "sandbox/" not in p.stderr


def test_a_dead_launcher_is_an_error_not_ok(tmp_path, clean):
    """If the process that forks the ranks dies (here: an interpreter without torch), the run failed."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('this torch is broken')\n")
    p = run_cli("sandbox.run", "-n", "2", "--json", os.path.join(EX, "allreduce.py"),
                env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"})
    assert p.returncode == 1, p.stdout + p.stderr
    d = json.loads(p.stdout)
    assert d["verdict"] == "error" and "this torch is broken" in d["diagnosis"]["summary"]


def test_diagnose_bad_dir():
    p = run_cli("sandbox.diagnose", "/no/such/dir")
    assert p.returncode == 2 and "not a directory" in p.stderr and "Traceback" not in p.stderr
