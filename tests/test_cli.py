"""`python -m sandbox.run` as a user runs it: the JSON contract, torchrun's environment, exit codes, bad input."""
import argparse
import json
import os
import re
import subprocess

import pytest

from conftest import ROOT, python, run_cli
from sandbox import cli, repro
from sandbox import run as run_cmd

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
        assert set(r) >= {"rank", "outcome", "exit_code", "pending", "error", "stack", "pid", "output"}
        assert (r["outcome"], r["exit_code"], r["pending"], r["error"], r["stack"]) == ("ok", 0, None, None, None)
        assert "sum over 4 ranks: [10.0, 10.0, 10.0, 10.0]" in r["output"]
        assert isinstance(r["pid"], int) and r["pid"] > 0
    assert len({r["pid"] for r in d["ranks"]}) == 4  # one process a rank
    assert "trace_dir" not in d  # only with --trace-dir: a temp dir is gone once the run returns
    assert isinstance(d["pgid"], int) and d["pgid"] > 0


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
    for r in d["ranks"]:  # every rank hung inside the user's function `step`, and its stack says so
        assert r["outcome"] == "hung" and isinstance(r["pid"], int)
        assert re.search(r'mismatch\.py", line \d+ in step', r["stack"] or ""), r["stack"]
        assert "step 0" in r["output"]
    assert "trace_dir" not in d and isinstance(d["pgid"], int)


def test_terminal_report_order(clean):
    p = run_cli("sandbox.run", "-n", "2", os.path.join(EX, "send_cycle.py"), env={"NO_COLOR": "1"})
    assert p.returncode == 1
    lines = p.stdout.splitlines()
    assert lines[0].startswith("HANG [p2p_cycle]: 2 ranks in")
    assert "\x1b[" not in p.stdout  # NO_COLOR honoured
    assert lines[1].startswith("Point-to-point cycle: rank 0 blocks in send to rank 1")  # the verdict's why, next
    assert p.stdout.index("Point-to-point cycle") < p.stdout.index("outcome")  # then the table of ranks


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
    p = run_cli("sandbox.run", "-n", "2", "--json", "--timeline", str(png), "--trace-dir", os.path.relpath(traces),
                os.path.join(EX, "send_cycle.py"))
    assert p.returncode == 1
    d = _json(p)
    assert d["trace_dir"] == str(traces)  # absolute, though given relative
    assert all(isinstance(r["pid"], int) and "send_cycle.py" in r["stack"] for r in d["ranks"])
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert set(os.listdir(traces)) >= {"rank-0.jsonl", "rank-0.log", "rank-1.jsonl", "rank-1.log",
                                       "stack-0.txt", "stack-1.txt"}
    # the kept traces give the same verdict offline
    q = run_cli("sandbox.diagnose", "--json", str(traces))
    d = json.loads(q.stdout)
    assert (d["verdict"], d["diagnosis"]["kind"]) == ("hang", "p2p_cycle")


BAD = [
    (["-n", "4", "no/such/script.py"], "no such script"),
    (["-n", "0", "x.py"], "argument -n/--nproc: 0 must be at least 1"),
    (["-n", "-2", "x.py"], "-2 must be at least 1"),
    (["-n", "100000", "EX/allreduce.py"], "at most 128"),
    (["-n", "abc", "x.py"], "'abc' is not a whole number"),
    (["-n", "2.5", "x.py"], "'2.5' is not a whole number"),
    (["--timeout", "-3", "x.py"], "-3 must be a positive number of seconds"),
    (["--hang-after", "0", "x.py"], "0 must be a positive number of seconds"),
    (["--timeout", "nan", "x.py"], "nan must be a positive number of seconds"),
    (["--timeout", "inf", "x.py"], "inf must be a finite number of seconds"),
    (["--timeout", "soon", "x.py"], "'soon' is not a number"),
    (["--debug", "loud", "x.py"], "'loud' is not one of DETAIL, INFO, OFF"),
    ([], "give a script"),
    (["--timeline", "out.txt", "EX/allreduce.py"], "--timeline: wants a .png, .svg or .pdf file name, not 'out.txt'"),
    (["--timeline", "no/such/t.png", "EX/allreduce.py"], "--timeline: the folder of 'no/such/t.png' does not exist"),
]


@pytest.mark.parametrize("args,says", BAD, ids=[" ".join(a) or "nothing" for a, _ in BAD])
def test_bad_input_is_one_sentence_exit_2(args, says, clean):
    args = [a.replace("EX/", EX + "/") for a in args]
    p = run_cli("sandbox.run", *args)
    assert p.returncode == 2
    assert p.stdout == ""  # refused before any rank ran: no report
    assert "Traceback" not in p.stderr
    assert says in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_picture_path_wants_a_picture_in_a_folder_that_exists(tmp_path):
    for name in ("t.png", "t.SVG", "t.pdf"):
        assert cli.picture_path(str(tmp_path / name)) == str(tmp_path / name)
    assert cli.picture_path("t.png") == "t.png"  # the current folder
    for bad in (str(tmp_path / "t.txt"), str(tmp_path / "t"), str(tmp_path / "missing" / "t.png")):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.picture_path(bad)


@pytest.mark.parametrize("args,says", [
    (["-n", "2.5", "kv-sync"], "'2.5' is not a whole number"),
    (["-n", "0", "kv-sync"], "argument -n: 0 must be at least 1"),
    (["--debug", "loud", "kv-sync"], "'loud' is not one of DETAIL, INFO, OFF"),
])
def test_repro_bad_input_is_one_sentence_exit_2(args, says):
    p = run_cli("sandbox.repro", *args)
    assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.parametrize("make", [run_cmd.parser, repro.parser], ids=["run", "repro"])
def test_debug_takes_either_spelling_and_shows_one(make):
    p = make()
    for text, level in [("DETAIL", "DETAIL"), ("detail", "DETAIL"), ("Info", "INFO"), ("off", "OFF"), ("OFF", "OFF")]:
        assert p.parse_args(["--debug", text, "x.py"]).debug == level
    assert p.parse_args(["x.py"]).debug is None
    help_text = " ".join(p.format_help().split())
    assert "--debug {DETAIL,INFO,OFF}" in help_text
    assert "detail" not in help_text.replace("DETAIL", "")


@pytest.mark.parametrize("make", [run_cmd.parser, repro.parser], ids=["run", "repro"])
def test_verbose_flag(make):
    p = make()
    assert p.parse_args(["-v", "x.py"]).verbose and p.parse_args(["--verbose", "x.py"]).verbose
    assert not p.parse_args(["x.py"]).verbose


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([python(), "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT))


def test_verbose_shows_the_sandboxs_own_steps_only():
    p = _python("import logging\n"
                "from sandbox import cli\n"
                "cli.setup_logging(False)\n"
                "logging.getLogger('sandbox.launcher').info('not shown without -v')\n"
                "cli.setup_logging(True)\n"
                "cli.setup_logging(True)\n"
                "logging.getLogger('sandbox.launcher').info('zygote started')\n"
                "logging.getLogger('urllib3').info('not the sandbox')\n"
                "logging.getLogger('urllib3').warning('a warning of another library')\n")
    assert p.returncode == 0, p.stderr
    ours, theirs = p.stderr.splitlines()
    assert re.fullmatch(r"sandbox: \+\d\.\d{3} s zygote started", ours), ours  # once, and when
    assert theirs == "a warning of another library"


def test_debug_level_reaches_the_ranks_in_any_case(tmp_path, clean):
    script = tmp_path / "env.py"
    script.write_text("import os\nprint('DEBUG', os.environ.get('TORCH_DISTRIBUTED_DEBUG'))\n")
    d = _json(run_cli("sandbox.run", "-n", "2", "--json", "--debug", "detail", str(script)))
    assert d["verdict"] == "ok", d["diagnosis"]
    assert all("DEBUG DETAIL" in r["output"] for r in d["ranks"])


def test_ctrl_c_anywhere_is_one_line_and_exit_130():
    """A real SIGINT inside `python -m sandbox.run`'s main, before the run could catch it (here: as it starts)."""
    p = _python("import runpy, signal, sys\n"
                "import sandbox\n"
                # Python's own Ctrl-C handler, as in a terminal (a test run started in the background of a shell
                # without job control inherits SIGINT ignored: see test_catalogue's twin)
                "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
                "def interrupted(*args, **kw):\n"
                "    signal.raise_signal(signal.SIGINT)  # Ctrl-C, handled at once\n"
                "    raise AssertionError('SIGINT did not interrupt')\n"
                "import sandbox.launcher; sandbox.launcher.run_script = interrupted\n"
                "sys.argv = ['sandbox.run', '-n', '2', 'x.py']\n"
                "runpy.run_module('sandbox.run', run_name='__main__', alter_sys=True)\n")
    assert p.returncode == cli.INTERRUPTED == 130, p.stderr
    assert p.stderr.strip() == "sandbox.run: interrupted.", p.stderr


@pytest.mark.no_gpu
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
                env={"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}, process=True)
    assert p.returncode == 1, p.stdout + p.stderr
    d = json.loads(p.stdout)
    assert d["verdict"] == "error" and "this torch is broken" in d["diagnosis"]["summary"]


def test_diagnose_bad_dir():
    p = run_cli("sandbox.diagnose", "/no/such/dir")
    assert p.returncode == 2 and "not a directory" in p.stderr and "Traceback" not in p.stderr
