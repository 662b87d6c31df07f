"""The scoreboard (benchmarks/scoreboard.py and benchmarks/scoring/): each parser fed real output of its tool, the
corpus' labels checked, the scoring rules, a run ended at its limit with nothing left behind, the command's usage
errors, and (slow) a real scoreboard run and its Ctrl-C.

The captured outputs under tests/data/scoreboard/ are real: `--keep` folders of scoreboard runs (gloo/: torch 2.13
CPU here; nccl/: `--gpu` on 4 H100s, torch 2.11.0+cu130) and torchfrtrace on real gloo dumps (frtrace_gloo/). Their
README says how each was made. A parser test reads one through `keep.load` and `parsers.of_run`, the path a live
run takes, so a parser that stops understanding its tool fails here.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, gone, wait_for
from benchmarks import scoreboard
from benchmarks.scoring import corpus, keep, parsers, score, table, tools

DATA = os.path.join(ROOT, "tests", "data", "scoreboard")
SCRIPT = os.path.join(ROOT, "benchmarks", "scoreboard.py")
COMMITTED = os.path.join(ROOT, "benchmarks", "scoreboard.json")


def saved(where: str) -> parsers.Report:
    """The report of a captured run: tests/data/scoreboard/<where> = <backend>/<case>/<variant>/<tool>."""
    _, case, variant, _ = where.split("/")
    return parsers.of_run(keep.load(os.path.join(DATA, where)), case + (".py" if variant == "faulty" else ".fixed.py"))


# (captured run, what the tool said in it, as the parser must read it). `has`: these must be among the lines.
CAPTURES = [
    # the sandbox: a hang it names, a failed rank it explains, a correct twin
    ("gloo/p2p_unmatched_no_recv/faulty/sandbox", dict(names=("p2p_unmatched",), ranks=(0, 1), has=(30,),
                                                       note="hang: p2p_unmatched")),
    ("gloo/mismatch_shape_bincount/faulty/sandbox", dict(names=("mismatch",), ranks=(1,), has=(25,),
                                                         note="error: collective_mismatch")),
    ("gloo/mismatch_shape_bincount/fixed/sandbox", dict(reported=False, note="ok: none")),
    ("gloo/finishes_not_destroyed/faulty/sandbox", dict(names=("not_destroyed",), ranks=(0, 1), has=(15,),
                                                        note="ok: none; warnings: not_destroyed")),  # it finished
    # plain torchrun: gloo's timeout; DDP's own check, which names the rank whose grads did not arrive
    ("gloo/p2p_unmatched_no_recv/faulty/torchrun", dict(names=("timeout",), has=(30, 37))),
    ("gloo/ddp_unused_pad_branch/faulty/torchrun", dict(names=("unused_parameters",), ranks=(1,), has=(44,))),
    ("gloo/mismatch_shape_bincount/faulty/torchrun", dict(names=(), has=(25,))),  # "Connection closed by peer"
    ("gloo/mismatch_shape_bincount/fixed/torchrun", dict(reported=False)),
    ("gloo/a2a_moe_local_splits/faulty/torchrun", dict(names=("mismatch",), said="enforce fail")),  # gloo's abort
    # DETAIL: the fingerprint check; monitored_barrier on the barrier; a SIGSEGV of DDP under DETAIL (a twin!)
    ("gloo/mismatch_shape_bincount/faulty/detail", dict(names=("mismatch",), ranks=(0, 1, 2), has=(25,))),
    ("gloo/p2p_unmatched_no_recv/faulty/detail", dict(names=("missing_ranks", "timeout"), ranks=(0, 1))),
    ("gloo/ddp_model_rank0_head/faulty/detail", dict(names=("model_differs",), ranks=(0, 1), has=(26,))),
    ("gloo/ddp_unused_pad_branch/fixed/detail", dict(names=(), ranks=(0,), said="(exitcode: -11)")),
    # the Flight Recorder on gloo: no dump is written at the timeout
    ("gloo/mismatch_shape_bincount/faulty/flight", dict(reported=False, note="no dumps written")),
    # NCCL (4 H100s, torch 2.11): torchfrtrace names the op mismatch and a culprit; or, one rank's dump missing,
    # refuses, and with --allow-incomplete-ranks "cannot decide"; the watchdog; DETAIL's exit warning on a twin
    ("nccl/mismatch_op_logger_gather/faulty/flight", dict(names=("mismatch",), ranks=(0,), has=(30,),
                                                          note="torchfrtrace: exit 0")),
    ("nccl/mismatch_shape_bincount/faulty/flight", dict(names=(), note="Missing dump files from ranks {1}; "
                                                        "torchfrtrace --allow-incomplete-ranks: exit 0")),
    ("nccl/mismatch_op_logger_gather/faulty/torchrun", dict(names=("timeout",), said="Watchdog caught")),
    ("nccl/mismatch_op_logger_gather/fixed/detail", dict(names=("not_destroyed",), said="destroy_process_group")),
]


@pytest.mark.parametrize("where,expect", CAPTURES, ids=[c[0] for c in CAPTURES])
def test_each_parser_reads_its_tools_real_output(where, expect):
    r = saved(where)
    assert r.reported == expect.get("reported", True), r
    if r.reported:
        assert r.names == expect["names"], r
        assert set(expect.get("has", ())) <= set(r.lines), r
        assert r.said, "a report quotes what the tool said"
    if "ranks" in expect:
        assert r.ranks == expect["ranks"], r
    assert expect.get("note", "") in r.note, r
    assert expect.get("said", "") in r.said, r


def test_a_run_at_the_limit_is_not_a_report():
    """What torchrun prints after it was told to stop (its SIGTERM handling) is not a verdict it reached."""
    got = keep.load(os.path.join(DATA, "nccl/p2p_cycle_kv_swap/fixed/torchrun"))
    assert got.main.exit_code is None and got.outcome == "limit"
    assert not parsers.of_run(got, "p2p_cycle_kv_swap.fixed.py").reported
    with open(os.path.join(DATA, "nccl/p2p_cycle_kv_swap/fixed/torchrun/late.txt")) as f:
        late = f.read()
    assert "Traceback" in late  # ...though it did print a traceback then: read as output, it would count
    assert parsers.torchrun(late, program="p2p_cycle_kv_swap.fixed.py", exit_code=1).reported


def test_torchfrtrace_on_real_gloo_dumps_still_fails_as_recorded():
    """torchfrtrace cannot read gloo's dumps (KeyError in build_collectives): the flight row's note says so. Rerun
    on the saved dumps, so a torch that learns to read them fails this test instead of being misreported."""
    folder = os.path.join(DATA, "frtrace_gloo", "mismatch_op_logger_gather")
    with open(os.path.join(folder, "torchfrtrace.txt")) as f:
        recorded = f.read()
    dumps = sorted(os.listdir(os.path.join(folder, "dumps")))
    r = parsers.flight([([], recorded, 1)], program="mismatch_op_logger_gather.py", dumps=dumps)
    assert not r.reported and "torchfrtrace: exit 1, KeyError: ('0'," in r.note
    p = subprocess.run(tools.launcher("torchfrtrace", "torch.distributed.flight_recorder.fr_trace")
                       + [os.path.join(folder, "dumps"), "--prefix", tools.PREFIX],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert parsers._last_line(p.stdout + p.stderr) == parsers._last_line(recorded)


def test_no_dumps_and_lines_of_other_files():
    assert parsers.flight([], program="x.py", dumps=[]).note == "no dumps written"
    text = 'File "/a/x.py", line 3\n  at /a/x.py:7\n File "/a/other_x.py", line 9\nother_x.py:11 x.fixed.py:12'
    assert parsers.program_lines(text, "x.py") == (3, 7)


# ---- the corpus ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("folder", sorted(corpus.SETS))
def test_the_corpus_is_well_formed(folder):
    folder = corpus.SETS[folder]
    cases, problems = corpus.load(folder)
    assert cases, "the corpus is empty"
    assert problems == {}, "\n".join(p for ps in problems.values() for p in ps)
    faulty = [f for f in os.listdir(folder) if f.endswith(".py") and not f.endswith(".fixed.py")]
    named = []
    for f in faulty:
        with open(os.path.join(folder, f)) as fh:
            named.append(fh.readline().strip())
    assert len(named) == len(set(named)), "two files say the same `# case:`"
    for c in cases.values():
        assert set(c.culprits) <= set(range(c.world)) and os.path.exists(c.fixed_path)


def test_the_two_sets_name_different_cases():
    """A case's name keys its runs and scores: the set written after the rules must not reuse one."""
    before, after = (set(corpus.load(corpus.SETS[s])[0]) for s in ("corpus", "corpus_after"))
    assert not before & after


def _write(folder, name, text):
    with open(os.path.join(folder, name), "w") as f:
        f.write(text)


GOOD = ("# case: mismatch_op_tiny\n# class: mismatch/op\n# names: mismatch\n# world: 2\n# culprits: 1\n"
        "# cause: broadcast, line 10\n# nccl: yes\n\"\"\"Rank 1 broadcasts, rank 0 all-reduces.\"\"\"\nimport x\n"
        "dist.broadcast(t, src=0)\n")
TWIN = "# case: mismatch_op_tiny\n# fixed: all-reduce on both\n# world: 2\n# nccl: yes\n\"\"\"Both all-reduce.\"\"\"\n"


@pytest.mark.parametrize("old,new,twin,problem", [
    ("", "", TWIN, None),
    ("# culprits: 1", "# culprits: 2", TWIN, "are not all ranks of a world of 2"),
    ("line 10", "line 9", TWIN, "line 9 does not contain the cause's call 'broadcast'"),
    ("# names: mismatch", "# names: hang", TWIN, "unknown cause 'hang'"),
    ("# class: mismatch/op", "# class: p2p/cycle", TWIN, "a case of class p2p/cycle is named p2p_..."),
    ("# case: mismatch_op_tiny", "# case: mismatch_op_other", TWIN, "should be the file's name"),
    ("# world: 2", "# world: 8", TWIN.replace("world: 2", "world: 8"), "should be one of 2, 3, 4"),
    ("# nccl: yes\n", "", TWIN, "line 7 should be `# nccl: ...`"),
    ("", "", TWIN.replace("world: 2", "world: 3"), "`world: 3` differs from the faulty file's 2"),
    ("", "", None, "it has no correct twin"),
], ids=["well formed", "culprit", "cause line", "cause", "class", "case", "world", "key order", "twin", "no twin"])
def test_each_corpus_check_can_fail(tmp_path, old, new, twin, problem):
    text = GOOD.replace(old, new) if old else GOOD
    assert (text != GOOD) == bool(old)
    _write(tmp_path, "mismatch_op_tiny.py", text)
    if twin:
        _write(tmp_path, "mismatch_op_tiny.fixed.py", twin)
    cases, problems = corpus.load(str(tmp_path))
    if problem is None:
        assert list(cases) == ["mismatch_op_tiny"] and problems == {}
        assert cases["mismatch_op_tiny"].to_json()["cause"] == {"call": "broadcast", "line": 10}
    else:
        assert cases == {} and problem in " ".join(problems["mismatch_op_tiny"]), problems


def test_a_twin_without_its_faulty_file_is_a_problem(tmp_path):
    _write(tmp_path, "mismatch_op_tiny.fixed.py", TWIN)
    assert "a twin without its faulty file" in corpus.load(str(tmp_path))[1]["mismatch_op_tiny"][0]


def test_the_quick_subset_names_corpus_cases_of_different_families():
    cases, _ = corpus.load()
    missing = [n for n in scoreboard.QUICK if n not in cases]
    assert not missing, f"--quick names cases the corpus lacks: {missing}"
    assert len({cases[n].cls for n in scoreboard.QUICK}) == len(scoreboard.QUICK)


# ---- the scoring rules ---------------------------------------------------------------------------------------

CASE = corpus.Case(name="mismatch_op_x", cls="mismatch/op", names="mismatch", world=3, culprits=(2,), call="broadcast",
                   line=17, nccl=True, fix="", path="x.py", fixed_path="x.fixed.py")


@pytest.mark.parametrize("variant,report,want", [
    ("faulty", dict(reported=True, names=("mismatch",), ranks=(2,), lines=(17, 20)), ("tp", True)),
    ("faulty", dict(reported=True, names=("mismatch",), ranks=(0, 1, 2), lines=(17,)), ("tp", False)),  # everyone
    ("faulty", dict(reported=True, names=("mismatch",), ranks=(2,), lines=(20,)), ("tp", False)),       # not its line
    ("faulty", dict(reported=True, names=("timeout",), ranks=(2,), lines=(17,)), ("wrong", False)),
    ("faulty", dict(reported=True), ("wrong", False)),
    ("faulty", dict(reported=False), ("fn", False)),
    ("fixed", dict(reported=True, names=("mismatch",)), ("noise", False)),
    ("fixed", dict(reported=False), ("quiet", False)),
])
def test_verdicts(variant, report, want):
    assert score.verdict(CASE, variant, parsers.Report(**report)) == want


def test_every_rank_singled_out_is_helpful_when_every_rank_is_a_culprit():
    cycle = corpus.Case(**{**CASE.__dict__, "culprits": (0, 1, 2)})
    assert score.verdict(cycle, "faulty", parsers.Report(reported=True, names=("mismatch",), ranks=(0, 1, 2),
                                                         lines=(17,))) == ("tp", True)


def test_metrics():
    def run(variant, verdict, helpful=False, seconds=1.0):
        return {"tool": "t", "case": "c", "variant": variant, "verdict": verdict, "helpful": helpful,
                "reported": verdict in ("tp", "wrong", "noise"), "seconds": seconds}

    m = score.metrics([run("faulty", "tp", True, 2.0), run("faulty", "wrong", seconds=4.0), run("faulty", "fn"),
                       run("faulty", "tp", seconds=9.0), run("fixed", "noise"), run("fixed", "quiet")])
    assert m == {"recall": 0.5, "precision": 0.5, "f1": 0.5, "helpfulness": 0.25, "noise": 0.5, "median_s": 4.0,
                 "faulty": 4, "fixed": 2, "tp": 2, "wrong": 1, "fn": 1, "noisy": 1, "helpful": 1}
    silent = score.metrics([run("faulty", "fn"), run("fixed", "quiet")])
    assert silent["precision"] is None and silent["f1"] == 0.0 and silent["median_s"] is None


# ---- running: the limit, nothing left behind ------------------------------------------------------------------

PARENT = r"""
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
print("child", child.pid, flush=True)
def late(signum, frame):
    print("said after the limit", flush=True)
    sys.exit(1)
signal.signal(signal.SIGTERM, late)
time.sleep(300)
"""


def test_the_limit_ends_the_run_and_what_it_started_in_a_session_of_its_own(clean, tmp_path):
    """Like torchrun's ranks: a child in a session of its own survives a kill of the parent's group alone."""
    t0 = time.monotonic()
    got = tools.capture([sys.executable, "-c", PARENT], env=dict(os.environ), cwd=str(tmp_path), limit=3)
    assert time.monotonic() - t0 < 3 + tools.GRACE_S + 10
    assert got.exit_code is None and got.cut_s is not None
    child = int(re.search(r"child (\d+)", got.text()).group(1))
    wait_for(lambda: gone(child), "the child in its own session to be ended", timeout=10)
    assert "said after the limit" in got.text(in_time=False) and "said after the limit" not in got.text()


def test_usage_errors_are_one_sentence_and_exit_2():
    for args, words in [(["--tools", "sandbox,gdb"], "unknown tool 'gdb'"), (["--cases", "no_such_case"],
                        "unknown case 'no_such_case'"), (["--limit", "0"], "must be more than 0"),
                        (["--frobnicate"], "unrecognized arguments"), (["--quick", "--cases", "x"], "not both")]:
        p = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert p.returncode == 2 and p.stdout == "", (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and words in p.stderr, (args, p.stderr)


def test_the_table_shows_every_tool_and_class():
    doc = {"corpus": {"c": {}}, "backend": "gloo", "torch": "2.13.0+cpu", "machine": "2 CPU cores, no GPU",
           "limit_s": 60, "scores": {}, "per_class": {}}
    runs = [{"tool": t, "case": "c", "variant": v, "verdict": ("tp" if v == "faulty" else "quiet"), "helpful": True,
             "reported": v == "faulty", "seconds": 1.5} for t in ("sandbox", "flight") for v in ("faulty", "fixed")]
    doc["scores"] = score.scores(runs, ["sandbox", "flight"])
    doc["per_class"] = score.per_class(runs, ["sandbox", "flight"], {"c": "mismatch/op"})
    text = table.render(doc)
    assert re.search(r"^sandbox\s+1\.00\s+1\.00\s+1\.00\s+1\.00\s+0\.00\s+1\.5", text, re.M), text
    assert re.search(r"^mismatch/op\s+1/1 1h 0n\s+1/1 1h 0n$", text, re.M), text


# ---- the committed JSON --------------------------------------------------------------------------------------

RERUN = "rerun `python benchmarks/scoreboard.py --write benchmarks/scoreboard.json`"


def stale(doc: dict, folder: str = corpus.CORPUS) -> list[str]:
    """What in a scoreboard document no longer matches the corpus' files (of `folder`)."""
    cases, _ = corpus.load(folder)
    out = [f"{n}: in the corpus, not in the scoreboard" for n in sorted(set(cases) - set(doc["corpus"]))]
    out += [f"{n}: in the scoreboard, not in the corpus" for n in sorted(set(doc["corpus"]) - set(cases))]
    for name in sorted(set(cases) & set(doc["corpus"])):
        c, d = cases[name], doc["corpus"][name]
        out += [f"{os.path.basename(path)} changed" for path, key in ((c.path, "sha256"), (c.fixed_path, "fixed_sha256"))
                if d[key] != corpus.sha256(path)]
    return out


@pytest.mark.parametrize("committed, folder, rerun", [
    (COMMITTED, corpus.CORPUS, RERUN),
    (os.path.join(ROOT, "benchmarks", "scoreboard-after.json"), corpus.CORPUS_AFTER,
     "rerun `python benchmarks/scoreboard.py --corpus benchmarks/corpus_after --tools sandbox --write "
     "benchmarks/scoreboard-after.json`")], ids=["corpus", "corpus_after"])
def test_the_committed_scoreboard_matches_the_corpus(committed, folder, rerun):
    name = os.path.relpath(committed, ROOT)
    if not os.path.exists(committed):
        pytest.skip(f"{name} is not written yet ({rerun})")
    with open(committed) as f:
        doc = json.load(f)
    problems = stale(doc, folder)
    assert not problems, f"{name} is stale ({'; '.join(problems)}): {rerun}"


def test_the_staleness_check_can_fail():
    cases, _ = corpus.load()
    doc = {"corpus": {n: c.to_json() for n, c in cases.items()}}
    assert stale(doc) == []
    first = sorted(cases)[0]
    doc["corpus"][first]["fixed_sha256"] = "0" * 64
    doc["corpus"]["mismatch_gone"] = doc["corpus"].pop(sorted(cases)[-1])
    assert stale(doc) == [f"{sorted(cases)[-1]}: in the corpus, not in the scoreboard",
                          "mismatch_gone: in the scoreboard, not in the corpus", f"{first}.fixed.py changed"]


# ---- the whole command (slow) --------------------------------------------------------------------------------

# one case, which each tool ends quickly, faulty and fixed: every tool's run, parser and score on real output in 8
# runs. With two cases it was the suite's longest test (56 s): 12 runs under torchrun, each an agent and 2 workers
# importing torch. Each parser also reads recorded real output of other cases (test_each_parser_reads_its_tools_...).
FAST = ["p2p_unwaited_isend_exit"]


@pytest.mark.slow
def test_a_real_scoreboard_run(clean):
    p = subprocess.run([sys.executable, SCRIPT, "--json", "--cases", ",".join(FAST), "--tools",
                        "sandbox,torchrun,detail,flight", "--limit", "60"], capture_output=True, text=True,
                       timeout=900, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert len(p.stderr.strip().splitlines()) == len(FAST) * 2 * 4  # a progress line per run
    keys = [(r["case"], r["variant"], r["tool"]) for r in doc["runs"]]
    assert sorted(keys) == sorted((c, v, t) for c in FAST for v in ("faulty", "fixed") for t in tools.TOOLS)
    assert doc["scores"]["sandbox"]["recall"] == 1.0 and doc["scores"]["sandbox"]["noise"] == 0.0, doc["runs"]
    for t in tools.TOOLS:  # the scores are the runs', recomputed here by hand
        mine = [r for r in doc["runs"] if r["tool"] == t]
        faulty = [r for r in mine if r["variant"] == "faulty"]
        tp = sum(r["verdict"] == "tp" for r in faulty)
        reported = sum(r["reported"] for r in mine)
        s = doc["scores"][t]
        assert s["recall"] == pytest.approx(tp / len(faulty), abs=1e-3)
        assert s["noise"] == pytest.approx(sum(r["reported"] for r in mine if r["variant"] == "fixed") / len(FAST))
        assert s["precision"] == (pytest.approx(tp / reported, abs=1e-3) if reported else None)
        assert s["helpful"] == sum(r["helpful"] for r in faulty)
        for r in mine:
            case = corpus.load()[0][r["case"]]
            want = score.verdict(case, r["variant"], parsers.Report(**{k: tuple(r[k]) if isinstance(r[k], list)
                                                                          else r[k] for k in
                                                                          ("reported", "names", "ranks", "lines")}))
            assert (r["verdict"], r["helpful"]) == want, r
    assert doc["backend"] == "gloo" and set(doc["corpus"]) == set(FAST)


@pytest.mark.slow
def test_ctrl_c_ends_every_run(clean):
    # SIGINT at its default, as in a terminal: a test run started in the background of a shell without job control
    # inherits it ignored, Python then installs no Ctrl-C handler, and the scoreboard ran to its end (exit 0)
    p = subprocess.Popen([sys.executable, SCRIPT, "--cases", "p2p_cycle_kv_swap", "--tools", "torchrun,sandbox",
                          "--limit", "120"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        import psutil

        def started():  # torchrun and its 2 ranks name the program on their command lines; they sit in the hang
            # until the limit, while the sandbox's run of it may have named the hang and ended already (on a machine
            # where torch imports slowly, before torchrun's workers start: waiting for it too waited forever)
            n = 0
            for c in psutil.Process(p.pid).children(recursive=True):
                try:
                    n += "p2p_cycle_kv_swap.py" in " ".join(c.cmdline())
                except psutil.NoSuchProcess:  # it ended while we looked: not one of those we wait for
                    pass
            return n >= 3

        wait_for(started, "torchrun's ranks to start", 120)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1] == "scoreboard: interrupted; every run in flight was ended" and not out
