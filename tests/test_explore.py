"""Exploring schedules (issue 31): `sandbox.schedules` draws a schedule from a seed and the calls of an unperturbed
run, `sandbox.trace.perturb` applies it inside a rank, `sandbox.explore` runs the program under K of them and
replays one. The programs of tests/data/schedules/ (written blind, from bug reports, with a correct twin each) are
in test_schedule_cases.py; here, the parts, on small programs of this file's own."""
from __future__ import annotations

import os
import re
import textwrap

import pytest

from sandbox import explore, schedules
from sandbox.run import main as run_main

pytest_plugins = ["pytester"]


def test_a_seed_gives_one_schedule_and_the_first_seeds_hold_each_call_in_turn_p2p_first():
    made = {0: ["init_process_group", "barrier", "isend", "destroy_process_group"],
            1: ["init_process_group", "barrier", "recv", "destroy_process_group"]}
    order = schedules.holds(made)
    assert order[:2] == [(0, 3), (1, 3)]  # the isend and the recv before anything else
    assert set(order) == {(r, k) for r in (0, 1) for k in range(1, 5)} and len(order) == 8
    firsts = [schedules.drawn(seed, made) for seed in range(1, 17)]
    assert [s.hold[:2] for s in firsts[:8]] == order and [s.hold[:2] for s in firsts[8:]] == order
    assert {s.hold[2] for s in firsts[:8]} == {0.4} and {s.hold[2] for s in firsts[8:]} == {0.8}
    assert all(not any(s.start) and s.slow is None for s in firsts)  # one call held, nothing else
    later = [schedules.drawn(seed, made) for seed in range(17, 60)]
    assert later == [schedules.drawn(seed, made) for seed in range(17, 60)]  # the same seed, the same schedule
    assert any(any(s.start) for s in later) and any(s.slow for s in later)
    assert all(1 <= s.hold[1] <= 4 and s.hold[2] in schedules.HOLDS_S for s in later)
    assert firsts[1].words() == "rank 1 held 0.4 s before its call 3"
    assert schedules.parsed(firsts[1].env()[schedules.ENV]) == {"seed": 2, "start": [0.0, 0.0], "hold": [1, 3, 0.4],
                                                                "slow": None, "match": None}
    assert schedules.seed_of(firsts[1].env()) == 2 and schedules.seed_of({}) is None
    assert schedules.parsed("not json") is None and schedules.parsed(None) is None
    with pytest.raises(ValueError, match="none given"):
        schedules.drawn(1, {})


RACE = """
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(1)
dist.barrier()
if rank == 0:
    time.sleep(0.2)  # some compute: rank 1 is usually in its recv by now
    {send}
else:
    dist.recv(t, src=0)
    assert t.item() == 1.0, f"rank 1 got {{t.item()}}"
dist.destroy_process_group()
"""
BROKEN = "w = dist.isend(t, dst=1)\n    t += 100  # written before wait()\n    w.wait()"
FIXED = "w = dist.isend(t.clone(), dst=1)\n    t += 100\n    w.wait()"


@pytest.fixture
def scripts(tmp_path):
    out = {}
    for name, send in (("broken", BROKEN), ("fixed", FIXED)):
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(RACE.format(send=send)))
        out[name] = str(path)
    return out


def test_explore_finds_the_isend_race_names_the_sender_and_replays_it(scripts, capsys, clean):
    code = run_main(["-n", "2", "--explore", "16", scripts["broken"]])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "error [rank_error] rank 0: 1 run (seed 2)" in out, out
    assert "seed 2: rank 1 held 0.4 s before its call 3" in out, out
    assert f"replay: python -m sandbox.run --replay 2 -n 2 {scripts['broken']}" in out, out
    assert "Rank 1 raised AssertionError: rank 1 got 101.0" in out, out
    for _ in range(3):
        assert run_main(["-n", "2", "--replay", "2", scripts["broken"]]) == 1
        assert "rank 1 got 101.0" in capsys.readouterr().out
    picture = os.path.join(os.path.dirname(scripts["broken"]), "failed.png")
    assert run_main(["-n", "2", "--explore", "4", "--timeline", picture, scripts["broken"]]) == 1
    assert f"timeline: {picture}" in capsys.readouterr().out and os.path.getsize(picture) > 1000


def test_explore_passes_the_fixed_twin_and_says_what_it_explored(scripts, capsys, clean):
    code = run_main(["-n", "2", "--explore", "16", scripts["fixed"]])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.startswith("Explored 16 schedules of 2 ranks after one unperturbed run:\n  ok: 16 runs"), out
    assert "every run finished: 8 of the 8 calls the ranks make held before they start (0.4 and 0.8 s)" in out, out


ANY_SOURCE = """
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.zeros(1)
if rank == 0:
    w = dist.irecv(t{src1})
    w.wait()
    first = t.item()
    dist.recv(t{src2})
    assert first == 1.0, f"rank 0 got {{first}} first"
else:
    time.sleep(rank - 1.0)  # rank 2 is a second behind: no hold of a schedule puts it first
    dist.send(torch.full((1,), float(rank)), dst=0)
dist.destroy_process_group()
"""


def test_a_receive_from_any_rank_is_given_each_sender_and_recorded_as_made(tmp_path, clean):
    """The first seeds give each receive without src each rank that sent to it (the irecv at call 2, the recv at
    call 3: ranks 1 and 2 each), whatever the timing; the run is recorded as the program made it (no src, the
    message from the rank given); a program that names its senders is given none."""
    from sandbox import run_script

    broken, fixed = tmp_path / "any.py", tmp_path / "named.py"
    broken.write_text(ANY_SOURCE.format(src1="", src2=""))
    fixed.write_text(ANY_SOURCE.format(src1=", src=1", src2=", src=2"))
    start = explore.started(lambda env: run_script(str(broken), world_size=3, env=env, warm=True))
    found = explore.explore(start, 16)
    assert found.baseline.ok and not found.ok, found.summary()
    schedule, res = found.failed
    assert (schedule.seed, schedule.match, schedule.hold) == (2, (0, 2, 2), None), found.summary()
    assert schedule.words() == (f"rank 0's call 2 (irecv at {broken}:10), a receive from any rank, matched to "
                                "rank 2's send")
    assert [s.match for s, _ in found.runs] == [(0, 2, 1), (0, 2, 2)]
    assert "rank 0 got 2.0 first" in res.diagnosis.summary
    irecv = next(e for e in res.events if e.get("rank") == 0 and e.get("op") == "irecv" and e["ev"] == "enter")
    waited = next(e for e in res.events if e.get("rank") == 0 and e["ev"] == "exit" and e.get("op") == "wait")
    assert irecv["peer"] is None and waited["from"] == 2
    assert [s.match for s in (schedules.drawn(k, **explore.plan(found.baseline)) for k in range(1, 6))] == \
        [(0, 2, 1), (0, 2, 2), (0, 3, 1), (0, 3, 2), None]
    named = run_script(str(fixed), world_size=3, warm=True)
    assert named.ok and explore.plan(named)["matches"] == [], named.diagnosis.summary


def test_schedules_run_at_once_give_what_running_them_in_turn_gives(scripts, clean):
    """Several schedules run at once (`explore.JOBS`), started in seed order: the answer is the one-at-a-time
    answer, every seed up to the first failure and none after it, though a later one was already up."""
    from sandbox import run_script

    start = explore.started(lambda env: run_script(scripts["broken"], world_size=2, env=env, warm=True))
    in_turn, at_once = explore.explore(start, 16, jobs=1), explore.explore(start, 16, jobs=3)
    said = [(s.seed, explore.outcome(r)) for s, r in in_turn.runs]
    assert said == [(1, "ok, warned [buffer_written]"), (2, "error [rank_error] rank 0")], said
    assert [(s.seed, explore.outcome(r)) for s, r in at_once.runs] == said, at_once.summary()


FIXED_FILE = """
import os, sys, time
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 0:  # a fixed path, as a checkpoint's: copies of this program run at once overwrite it
    with open(sys.argv[1], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(0.5)
    with open(sys.argv[1]) as f:
        assert f.read() == str(os.getpid()), "another copy wrote the file"
dist.barrier()
dist.destroy_process_group()
"""


def test_a_failure_seen_beside_other_runs_counts_only_if_it_fails_alone(tmp_path, clean):
    """Copies of a program that writes a fixed file trip over each other when three schedules run at once; each
    such failure is run again alone, which passes, so the exploration passes, as one run at a time would."""
    from sandbox import run_script

    script = tmp_path / "fixed_file.py"
    script.write_text(FIXED_FILE)
    start = explore.started(lambda env: run_script(str(script), [str(tmp_path / "ckpt")], world_size=2, env=env,
                                                   warm=True))
    found = explore.explore(start, 3, jobs=3)
    assert found.ok and [s.seed for s, _ in found.runs] == [1, 2, 3], found.summary()


SLEEPER = """
import os, sys, time
import torch.distributed as dist

dist.init_process_group("gloo")
explored = len(os.listdir(sys.argv[1])) >= 2  # the unperturbed run's two ranks came first
open(os.path.join(sys.argv[1], f"up-{os.getpid()}"), "w").close()
time.sleep(600 if explored else 0)  # an explored run ends only if it is stopped
dist.barrier()
dist.destroy_process_group()
"""


def test_ctrl_c_stops_every_schedule_that_is_up(tmp_path, clean):
    """Ctrl-C reaches the main thread only; the runs up in the exploration's threads are stopped with it: exit 130,
    'interrupted', and nothing of any of them left (`clean`). An explored run sleeps 600 s: only a run that was
    stopped ends within the wait below, and two of them up at once (six marks) shows they run side by side."""
    import signal
    import subprocess
    import sys

    from conftest import ROOT, wait_for

    script, marks = tmp_path / "sleeper.py", tmp_path / "up"
    script.write_text(SLEEPER)
    marks.mkdir()
    p = subprocess.Popen([sys.executable, "-m", "sandbox.run", "-n", "2", "--explore", "16", str(script), str(marks)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    try:  # the unperturbed run's 2 ranks, then at least 2 explored runs up at once (each sleeps 3 s)
        wait_for(lambda: p.poll() is not None or len(os.listdir(marks)) >= 6, "two explored runs to be up at once")
        assert p.poll() is None, p.communicate()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)  # each run stops within a poll of its watch
    finally:
        if p.poll() is None:  # only when an assertion above failed
            p.kill()
            p.communicate()
    assert p.returncode == 128 + signal.SIGINT, (out, err)
    assert "interrupted" in err and "Traceback" not in err, err


def test_a_program_that_fails_unperturbed_is_not_explored(tmp_path, capsys, clean):
    path = tmp_path / "fails.py"
    path.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\nraise SystemExit(3)\n")
    assert run_main(["-n", "2", "--explore", "4", str(path)]) == 1
    out = capsys.readouterr().out
    assert re.match(r"The program fails without any perturbation \(crash \[rank_crashed\] rank [01]\): nothing to"
                    r" explore\.", out), out


@pytest.mark.parametrize("argv, said", [
    (["--explore", "4", "--nnodes", "2", "--nproc-per-node", "1"], "--explore and --replay run the sandbox's own"),
    (["-n", "2", "--explore", "4", "--replay", "2"], "--explore finds a schedule, --replay runs one"),
    (["-n", "2", "--explore-all"], "--explore-all goes with --explore K"),
    (["-n", "2", "--explore", "0"], "--explore"),
    (["-n", "2", "--replay", "2", "--trace-dir", "t"], "--trace-dir keeps one run's traces"),
])
def test_explore_options_are_one_sentence(argv, said, capsys):
    with pytest.raises(SystemExit) as e:
        run_main([*argv, os.devnull])
    assert e.value.code == 2
    assert said in capsys.readouterr().err


def test_explore_and_replay_take_whole_numbers():
    with pytest.raises(ValueError, match="at least 1"):
        explore.explore(lambda env: None, 0)
    with pytest.raises(ValueError, match="from 1"):
        explore.replay(lambda env: None, 0)


def isend_race():
    """RACE as a function (the ranks import this module by name): launch(explore=K) and the pytest marker run it."""
    import time

    import torch
    import torch.distributed as dist

    t = torch.ones(1)
    dist.barrier()
    if dist.get_rank() == 0:
        time.sleep(0.2)
        w = dist.isend(t, dst=1)
        t += 100
        w.wait()
    else:
        dist.recv(t, src=0)
        assert t.item() == 1.0, f"rank 1 got {t.item()}"


def test_launch_explores_and_replays(clean):
    from sandbox import launch

    found = launch(isend_race, world_size=2, init=True, explore=16)
    assert not found.ok and found.failed[0].seed == 2, found.summary()
    assert "rank 1 got 101.0" in str(found) and "seed 2: rank 1 held 0.4 s before its call 3" in str(found)
    assert "<pre>Explored 2 schedules" in found._repr_html_()
    again = launch(isend_race, world_size=2, init=True, replay=2)
    assert again.verdict == "error" and again.diagnosis.culprit_ranks == [0], again.diagnosis.summary
    every = launch(isend_race, world_size=2, init=True, explore=4, explore_all=True)
    outcomes = {"ok, warned [buffer_written]", "error [rank_error] rank 0"}  # a finished run still broke a contract
    assert len(every.runs) == 4 and set(every.outcomes()) == outcomes, every.summary()


INNER = """
import pytest
import torch
import torch.distributed as dist

@pytest.mark.sandbox(explore=6)
def test_race():
    import time
    t = torch.ones(1)
    dist.barrier()
    if dist.get_rank() == 0:
        time.sleep(0.2)
        w = dist.isend(t, dst=1)
        t += 100
        w.wait()
    else:
        dist.recv(t, src=0)
        assert t.item() == 1.0, f"rank 1 got {t.item()}"
"""


def test_the_pytest_marker_explores(pytester):
    pytester.makepyfile(test_inner=INNER)
    r = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-rN")
    out = r.stdout.str()
    assert r.ret == 1, out
    assert "Explored 2 schedules of 2 ranks after one unperturbed run, stopped at the first failure" in out, out
    assert "seed 2: rank 1 held 0.4 s before its call 3" in out and "rank 1 got 101.0" in out, out


def test_the_magic_explores(clean, capsys):
    from conftest import need

    need("IPython")  # the magic shows its table with IPython's display
    from sandbox import magic

    cell = RACE.format(send=BROKEN)
    found = magic.run_cell("-n 2 --explore 8", cell)
    assert not found.ok and found.failed[0].seed == 2, found.summary()
    assert "<cell>" in found.result.diagnosis.summary, found.result.diagnosis.summary
    res = magic.run_cell("-n 2 --replay 2", cell)
    assert res.verdict == "error" and "schedule 2: rank 1 held 0.4 s before its call 3" in capsys.readouterr().out
    assert magic.run_cell("-n 2 --explore 2 --replay 2", cell) is None
    assert "--explore K (with --explore-all) or --replay SEED" in capsys.readouterr().err


def test_the_docs_page_shows_what_the_runs_print(tmp_path, capsys, monkeypatch, clean):
    """docs/explore.md's race.py, explored, replayed and fixed, and its gather_results.py explored: the page's
    summaries are these runs' own lines."""
    from conftest import ROOT

    page = open(os.path.join(ROOT, "docs", "explore.md"), encoding="utf-8").read()
    scripts = dict(re.findall(r'```python title="(\w+\.py)"\n(.*?)```', page, re.S))
    blocks = re.findall(r"```console\n\$ (python -m sandbox\.run [^\n]*)\n(.*?)```", page, re.S)
    assert sorted(scripts) == ["gather_results.py", "race.py"]
    for name, script in scripts.items():
        (tmp_path / name).write_text(script)
    fixed = scripts["race.py"].replace("dist.isend(t, dst=1)", "dist.isend(t.clone(), dst=1)")
    assert fixed != scripts["race.py"]
    (tmp_path / "race_fixed.py").write_text(fixed)
    monkeypatch.chdir(tmp_path)  # the page's commands name the scripts as they are in the working directory
    assert len(blocks) == 4
    for command, shown in blocks:
        argv = command.split()[3:]
        run_main(argv)
        out = capsys.readouterr().out
        summary = shown.split("\n\n")[0]  # the lines before the run's report (whose seconds differ per run)
        assert out.startswith(summary), f"{command}\n--- the page:\n{summary}\n--- the run:\n{out}"
        flat = " ".join(out.split())
        for part in shown.split("\n\n")[1:]:  # the report's lines after its headline, as far as the page quotes
            quoted = " ".join(" ".join(part.splitlines()[1:]).split()).removesuffix("...").strip()
            assert quoted in flat, f"{command}: the page quotes {quoted!r}, the run printed:\n{out}"


def test_a_set_ordered_program_gets_string_hash_seeds_first():
    made = {0: ["init_process_group", "all_reduce", "all_reduce"], 1: ["init_process_group", "all_reduce",
                                                                       "all_reduce"]}
    hashed = [schedules.drawn(seed, made, hashed=True) for seed in range(1, 9)]
    assert all(s.hash_seeds and len(set(s.hash_seeds)) == 2 and s.hold is None for s in hashed[:schedules.HASH_TRIES])
    plain = [schedules.drawn(seed, made) for seed in range(1, 5)]
    assert [s.hold for s in hashed[schedules.HASH_TRIES:]] == [s.hold for s in plain]  # then the timing schedules
    assert [s.seed for s in hashed] == list(range(1, 9))
    first = hashed[0]
    a, b = first.hash_seeds
    assert first.words() == f"string-hash seeds {a} (even ranks) and {b} (odd ranks)"
    from sandbox.defaults import HASH_SEED_LIST_ENV
    assert first.env()[HASH_SEED_LIST_ENV] == f"{a},{b}" and HASH_SEED_LIST_ENV not in plain[0].env()


def test_a_run_given_string_hash_seeds_deals_them_to_its_ranks(tmp_path, clean):
    from sandbox import run_script
    from sandbox.defaults import HASH_SEED_LIST_ENV

    script = tmp_path / "h.py"
    script.write_text("import os\nprint(hash('loss'), os.environ.get('PYTHONHASHSEED'))\n")
    got = [run_script(str(script), world_size=4, warm=True, env={HASH_SEED_LIST_ENV: seeds}) for seeds in
           ("11,22", "11,22", "33,44")]
    printed = [[r.output.split() for r in res.ranks] for res in got]
    assert printed[0] == printed[1]  # the same seeds, the same hashes: a replay
    assert printed[0][0] == printed[0][2] != printed[0][1] == printed[0][3]  # rank r under seed r % 2
    assert printed[2][0] != printed[0][0]
    assert all(p[1] == "None" for res in printed for p in res)  # the ranks' environment is the run's
