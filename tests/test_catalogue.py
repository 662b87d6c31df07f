"""The bug catalogue: every variant of every bug behaves as its module documents (real gloo ranks), plus the
`python -m sandbox.repro` CLI."""
import dataclasses
import importlib
import json
import os
import re
import subprocess
import time

import psutil
import pytest

from conftest import ROOT, catalogue_run, python, run_cli
from sandbox import _paths, launch
from sandbox.bugs import Bug, Expect, read_bug, registry, run_variant, unavailable, unmet_expectations

BUGS = registry()
CASES = [(slug, v) for slug, b in BUGS.items() if b.needs != "gpu" for v in ("broken", "fixed")]


def test_catalogue_has_the_documented_bugs():
    documented = {"init-port", "group-order", "xpu-device-id", "aux-data", "kv-sync", "cross-device",
                  "resample-desync"}
    assert documented <= set(BUGS)
    assert len(set(BUGS) - documented) >= 2  # and pitfalls of the primitives themselves
    for b in BUGS.values():
        assert b.needs in ("cpu", "gpu", "simulated")
        assert 1 <= b.min_world_size <= b.world_size
        for part in ("Symptom:", "Root cause:", "Fix:", "Run: python -m sandbox.repro " + b.slug):
            assert part in b.doc, f"{b.slug}: docstring lacks {part!r}"
        assert "(pasted" not in b.doc, f"{b.slug}: the Run section has no real output yet"
        assert b.explanation.startswith("Symptom:")
        assert "Run:" not in b.explanation and "Source:" not in b.explanation
        if b.gpu:  # what NCCL does is said in the docstring (repro's "Why" and the docs page) and in the record
            assert b.on_gpus, f"{b.slug}: its docstring does not say how it behaves on NCCL (On GPUs (NCCL): ...)"
            assert 2 <= b.gpu.min_world_size <= b.world_size


@pytest.mark.parametrize("slug,variant", CASES, ids=[f"{s}-{v}" for s, v in CASES])
def test_variant_behaves_as_documented(slug, variant, clean):
    bug = BUGS[slug]
    if unavailable(bug):  # a bug on simulated nodes, without the root they need
        pytest.skip(unavailable(bug))
    res, ok, why = catalogue_run(slug, variant)  # once per test run: the docs build draws the bug's page from it
    assert ok, f"{slug} {variant}: {why}\n{res.diagnosis.summary}"
    if variant == "fixed":
        assert res.verdict == "ok"
        assert res.warnings == [], [w.summary for w in res.warnings]  # a fix breaks no contract either
    else:
        assert res.verdict != "ok" or bug.broken.differs_from_reference  # its symptom: a failure, or a wrong answer
    cited = _sample_sites(bug, variant)  # the docstring's sample output must not drift from the code it cites
    seen = {e.get("site") for e in res.events} | {(r.error or {}).get("site") for r in res.ranks}
    seen.add(res.diagnosis.site)  # a rule may cite a line that is no call (ddp-unused-parameters' `if`)
    # a rank busy outside any call (checkpoint-timeout's save) is cited from its stack
    seen |= {f"{_paths.shown_path(m.group(1))}:{m.group(2)}"
             for r in res.ranks for m in re.finditer(r'File "(.+)", line (\d+)', r.stack or "")}
    assert cited <= seen, (f"{slug}'s Run: sample cites {sorted(cited - seen)}, which this run did not report:\n"
                           f"{res.diagnosis.summary}\nranks with a stack: {[r.rank for r in res.ranks if r.stack]}")


def _sample_sites(bug, variant):
    """The bug module's sites that the docstring's "Run:" sample output cites for one variant."""
    run = bug.doc.split("\nRun: ", 1)[-1]
    block = re.search(rf"^\s*{variant}: (.*?)(?=^\s*(?:broken|fixed): |\Z)", run, re.S | re.M)
    path = bug.module.replace(".", "/") + ".py"
    return set(re.findall(rf"{re.escape(path)}:\d+", block.group(1))) if block else set()


def test_the_check_can_fail(clean):
    """A fixed variant held against its broken expectation must be rejected."""
    bug = BUGS["kv-sync"]
    res, ok, _ = run_variant(bug, "fixed", bug.world_size)
    assert ok
    why = unmet_expectations(bug.broken, res)
    assert "verdict ok, expected hang" in why


def test_repro_cli_list_and_usage():
    p = run_cli("sandbox.repro", "--list", "--json")
    assert p.returncode == 0
    listed = {b["slug"] for b in json.loads(p.stdout)}
    assert listed == set(BUGS)
    p = run_cli("sandbox.repro", "--list")
    assert p.returncode == 0 and "kv-sync" in p.stdout and "simulated" in p.stdout
    p = run_cli("sandbox.repro", "no-such-bug")
    assert p.returncode == 2 and "kv-sync" in p.stderr and "Traceback" not in p.stderr
    p = run_cli("sandbox.repro", "group-order", "-n", "2")
    assert p.returncode == 2 and "at least 4" in p.stderr
    p = run_cli("sandbox.repro", "kv-sync", "--variant", "sideways")
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_repro_cli_run_json_and_explanation(clean):
    p = run_cli("sandbox.repro", "kv-sync", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["as_documented"] is True
    assert [v["variant"] for v in d["variants"]] == ["broken", "fixed"]
    assert d["variants"][0]["result"]["diagnosis"]["kind"] == "p2p_cycle"
    assert "send waits for" in d["explanation"] or "does not return until the peer" in d["explanation"]
    p = run_cli("sandbox.repro", "group-order", "--variant", "broken")
    assert p.returncode == 0
    assert re.search(r"HANG \[group_mismatch\]", p.stdout) and "as documented" in p.stdout
    assert "Root cause:" in p.stdout


def test_repro_debug_detail_shows_torchs_own_report(clean):
    p = run_cli("sandbox.repro", "resample-desync", "--variant", "broken", "--debug", "detail", "--json")  # any case
    d = json.loads(p.stdout)
    assert p.returncode == 0, d
    res = d["variants"][0]["result"]
    assert res["diagnosis"]["kind"] == "collective_mismatch"
    text = " ".join((r["error"] or {}).get("message", "") + r["output"] for r in res["ranks"])
    assert "mismatch" in text.lower()  # PyTorch's own fingerprint check spoke too


# Sources a user of the package cannot open: the project's private notes and the write-ups they came from.
UNOPENABLE = re.compile(r"FACTS\.md|DESIGN\.md|\bshared/|source document|the document", re.IGNORECASE)


def test_explanations_cite_what_a_user_can_open():
    for b in BUGS.values():
        for text in (b.doc, b.source):
            found = UNOPENABLE.search(text)
            assert found is None, f"{b.slug} cites {found.group(0)!r}: cite PyTorch's docs or source, or our files"


def test_the_registry_reads_what_importing_the_module_gives():
    """The registry evaluates `BUG = Bug(...)` from the source; the module's own BUG must be the same record."""
    for b in BUGS.values():
        mod = importlib.import_module(b.module)
        assert dataclasses.replace(mod.BUG, module=b.module) == b, b.slug
        assert b.doc == mod.__doc__, b.slug


def test_a_bug_record_may_use_only_literals(tmp_path):
    path = tmp_path / "odd.py"
    path.write_text('"""doc"""\nWORLD = 4\nBUG = Bug(slug="odd", title="t", source="s", symptom="s",'
                    ' broken=Expect("hang"), fixed=Expect(), world_size=WORLD)\n')
    with pytest.raises(ValueError, match="only literals, Bug, Expect and Gpu"):
        read_bug(str(path), "x.odd")
    path.write_text('"""no record here"""\n')
    assert read_bug(str(path), "x.none") is None


DOC = """odd: what breaks, in one line.

Source: a real report.

Symptom: it hangs.

Root cause: a send waits.
Fix: post both sides.

Simulated on CPU: FakeTensors.

On GPUs (NCCL): it completes
on two ranks.

and hangs on three.

Run: python -m sandbox.repro odd
    broken: HANG
"""


def test_a_docstring_is_read_in_its_parts():
    b = Bug(slug="odd", title="t", source="s", symptom="s", broken=Expect("hang"), fixed=Expect(), _doc=DOC)
    assert b.parts == {"intro": "odd: what breaks, in one line.", "Source": "a real report.", "Symptom": "it hangs.",
                       "Root cause": "a send waits.", "Fix": "post both sides.", "Simulated": "FakeTensors.",
                       "On GPUs": "it completes\non two ranks.\n\nand hangs on three.",
                       "Run": "python -m sandbox.repro odd\n    broken: HANG"}
    assert b.explanation == ("Symptom: it hangs.\n\nRoot cause: a send waits.\n\nFix: post both sides.\n\n"
                             "Simulated on CPU: FakeTensors.\n\n"
                             "On GPUs (NCCL): it completes\non two ranks.\n\nand hangs on three.")
    assert b.on_gpus == "it completes on two ranks."  # its first paragraph, on one line


def _python(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([python(), "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def test_listing_help_and_usage_errors_do_not_import_torch():
    """`--list`, `--help`, an unknown slug and usage errors answer without importing torch (which takes seconds)."""
    p = _python("""
import contextlib, io, sys
import sandbox.repro as repro
for argv in (["--list"], ["--list", "--json"], ["--help"], ["no-such-bug"], ["group-order", "-n", "2"],
             ["kv-sync", "-n", "2.5"], ["kv-sync", "--debug", "loud"], []):
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            code = repro.main(argv)
        except SystemExit as e:
            code = e.code
    print(argv, code, len(out.getvalue()) > 0, err.getvalue().strip()[:60])
print("torch imported:", sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
""")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[-1] == "torch imported: []", p.stdout
    codes = [line.split("] ")[1].split()[:2] for line in lines[:-1]]
    assert codes == [["0", "True"], ["0", "True"], ["0", "True"], ["2", "False"], ["2", "False"], ["2", "False"],
                     ["2", "False"], ["2", "False"]], p.stdout


_INTERRUPTED_IN_MAIN = """
import runpy, signal, sys
import sandbox.bugs
# Python's own Ctrl-C handler, as in a terminal: a test run started in the background of a shell without job control
# inherits SIGINT ignored, and Python then installs no handler (the run was not interruptible: the test is moot)
signal.signal(signal.SIGINT, signal.default_int_handler)


def interrupted(*args, **kw):
    signal.raise_signal(signal.SIGINT)  # Ctrl-C, delivered here and now (raise_signal runs the handler at once)
    raise AssertionError("SIGINT did not interrupt")


sandbox.bugs.registry = interrupted
sys.argv = ["sandbox.repro", "kv-sync"]
runpy.run_module("sandbox.repro", run_name="__main__", alter_sys=True)
"""


def test_ctrl_c_anywhere_is_one_line_and_exit_130():
    """A real SIGINT inside `python -m sandbox.repro`'s main, where nothing of the run catches it yet."""
    p = _python(_INTERRUPTED_IN_MAIN)
    assert p.returncode == 130, p.stderr
    assert p.stderr.strip() == "sandbox.repro: interrupted.", p.stderr
    assert p.stdout == ""


def test_ctrl_c_while_the_ranks_start(clean):
    """Ctrl-C from outside while the run is starting its ranks: one line, exit 130, nothing left behind."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([python(), "-m", "sandbox.repro", "kv-sync"], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not psutil.Process(proc.pid).children() and proc.poll() is None:  # the zygote: the run has begun
            assert time.monotonic() < deadline, "the run started no process in 30 s"
            time.sleep(0.01)
        proc.send_signal(2)  # SIGINT, as Ctrl-C sends it to the terminal's foreground process
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "sandbox.repro: interrupted.", err


def _kv_exchange(order: str):
    """kv-sync's exchange of every layer at once, in the order its docstring advises ("posted": every isend and
    irecv posted in one batch_isend_irecv, then waited) or the one it warns against ("parity": even ranks send
    first, odd ranks receive first). Returns the decoded tokens."""
    import torch.distributed as dist

    from sandbox.bugs.kv_sync import PROMPT, _buffers, _setup, decode, prefill

    model, rank, world, own, mine = _setup()
    cache, first = prefill(model, rank, world, mine)
    peers = [p for p in range(world) if p != rank]
    theirs = {p: [layer for layer, o in own.items() if o == p] for p in peers}
    got = {layer: _buffers(model, len(PROMPT)) for p in peers for layer in theirs[p]}
    if order == "posted":
        ops = []
        for p in peers:
            ops += [dist.P2POp(dist.isend, t, p) for layer in mine for t in cache[layer]]
            ops += [dist.P2POp(dist.irecv, t, p) for layer in theirs[p] for t in got[layer]]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    else:
        def send(p):
            for layer in mine:
                for t in cache[layer]:
                    dist.send(t, dst=p)

        def recv(p):
            for layer in theirs[p]:
                for t in got[layer]:
                    dist.recv(t, src=p)

        for p in peers:
            (send if rank % 2 == 0 else recv)(p)
        for p in peers:
            (recv if rank % 2 == 0 else send)(p)
    cache.update(got)
    tokens = decode(model, cache, first)
    dist.destroy_process_group()
    return tokens


def test_kv_syncs_advice_holds_on_an_odd_number_of_ranks(clean):
    """The docstring's advice (post both sides, then wait) decodes the reference's tokens on 3 ranks; the order it
    warns against (even ranks send first) deadlocks there, ranks 0 and 2 each sending to the other."""
    bug = BUGS["kv-sync"]
    assert "batch_isend_irecv" in bug.parts["Fix"] and "odd number of ranks" in bug.parts["Fix"]
    import importlib
    want = importlib.import_module(bug.module).reference(world_size=3)["pairwise"]
    posted = launch(_kv_exchange, world_size=3, args=("posted",), preload=[bug.module])
    assert posted.verdict == "ok", posted.diagnosis.summary
    assert posted.values == [want] * 3
    parity = launch(_kv_exchange, world_size=3, args=("parity",), preload=[bug.module])
    assert (parity.verdict, parity.diagnosis.kind) == ("hang", "p2p_cycle"), parity.diagnosis.summary
    assert set(parity.diagnosis.culprit_ranks) >= {0, 2}, parity.diagnosis.summary


def test_the_readme_and_the_labs_list_every_bug():
    """The README's catalogue table has a row for every bug, and labs/README.md one for every notebook."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    rows = set(re.findall(r"^\| `([a-z0-9-]+)` \|", readme, re.M))
    assert set(BUGS) <= rows, sorted(set(BUGS) - rows)
    labs = open(os.path.join(ROOT, "labs", "README.md"), encoding="utf-8").read()
    listed = set(re.findall(r"^\| `(\d\d_[a-z0-9_]+)` \|", labs, re.M))
    notebooks = {f[:-6] for f in os.listdir(os.path.join(ROOT, "labs")) if f.endswith(".ipynb")}
    assert listed == notebooks, (sorted(notebooks - listed), sorted(listed - notebooks))
