"""The Flight Recorder lens on real gloo ranks: each framework example (examples/framework/) is named by the rank that
differs, the cause in the user's terms and the user's line; the correct DDP and FSDP2 loops raise no warning; the
merged events hold DDP's C++ gradient all_reduces; with the recorder off the uneven case falls back to its symptom
(so it is the lens that names it); and `sandbox.flight` reads real dumps that a sandbox run left in its trace
directory. Expected lines are found in the examples' source, never typed in: an edit to an example moves them."""
import json
import os
import pickle

import pytest

from conftest import ROOT, leftovers, run_cli
from sandbox import flight, flight_offline, flight_view, policy
from sandbox.events import load_dir
from sandbox.launcher import launch, run_script

FW = os.path.join(ROOT, "examples", "framework")
RUN_TIMEOUT_S = 180  # the whole run's limit: these runs take seconds; the machine may be loaded


def _site(name: str, text: str) -> str:
    """`examples/framework/<name>:<line>` of the one line of the example that holds `text`."""
    with open(os.path.join(FW, name)) as f:
        hits = [i for i, line in enumerate(f, 1) if text in line]
    assert len(hits) == 1, f"{text!r} is on lines {hits} of {name}: the test cannot tell which one is meant"
    return f"examples/framework/{name}:{hits[0]}"


def _run(name: str, n: int = 4, **options):
    return run_script(os.path.join(FW, name), world_size=n, timeout=RUN_TIMEOUT_S, **options)


def _flight_calls(res, op: str = "all_reduce") -> dict[int, list[dict]]:
    """rank -> the enter events of `op` that only the Flight Recorder saw."""
    out: dict[int, list[dict]] = {}
    for e in res.events:
        if e.get("ev") == "enter" and e.get("lens") == "flight" and e.get("op") == op:
            out.setdefault(e["rank"], []).append(e)
    return out


# ------------------------------------------------------------------------------------------ DDP, uneven steps

@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    """One live run of ddp_uneven.py on 4 ranks with its trace directory kept (the checks below share it)."""
    d = tmp_path_factory.mktemp("uneven")
    res = _run("ddp_uneven.py", trace_dir=str(d))
    assert leftovers() == []
    return res, str(d)


def _named_as_uneven(d):
    backward = _site("ddp_uneven.py", "loss.backward()")
    assert (d.kind, d.culprit_ranks, d.site) == ("uneven_steps", [3], backward), d.summary
    assert "Rank 3 ran more training steps than ranks 0-2" in d.summary, d.summary
    assert f"`loss.backward()` at {backward}" in d.summary, d.summary
    assert "(ranks 0-2 made 3; rank 3 made 4)" in d.summary, d.summary
    assert "model.join()" in d.summary and "DistributedSampler(drop_last=True)" in d.summary, d.summary
    assert d.op == "all_reduce" and d.group == [0, 1, 2, 3] and isinstance(d.seq, int), d
    assert d.details["gradient_all_reduces"] == {"0": 3, "1": 3, "2": 3, "3": 4}, d.details


def test_a_rank_with_one_more_batch_under_ddp_is_named_with_its_steps_and_the_remedy(uneven, clean):
    res, _ = uneven
    assert res.verdict in ("error", "hang"), res.diagnosis.summary
    _named_as_uneven(res.diagnosis)
    assert res.warnings == [], [w.summary for w in res.warnings]


def test_the_kept_trace_directory_gives_the_same_diagnosis_offline(uneven, clean):
    from sandbox.diagnose.__main__ import load_result

    res, d = uneven
    assert {f"fr-{r}.pkl" for r in range(4)} <= set(os.listdir(d))  # every rank's recorder was dumped there
    _named_as_uneven(load_result(d).diagnosis)
    p = run_cli("sandbox.diagnose", "--json", d)
    assert p.returncode == 1, p.stdout + p.stderr
    j = json.loads(p.stdout)["diagnosis"]
    assert (j["kind"], j["culprit_ranks"], j["site"]) == ("uneven_steps", [3], _site("ddp_uneven.py",
                                                                                     "loss.backward()")), j


def test_the_merged_events_hold_ddps_gradient_all_reduces_from_the_recorder(uneven):
    res, _ = uneven
    got = _flight_calls(res)
    assert {r: len(cs) for r, cs in got.items()} == {0: 3, 1: 3, 2: 3, 3: 4}, got  # one a step: Linear(8, 1) is 9
    for cs in got.values():                                                          # floats, one bucket
        for c in cs:
            assert (c["shapes"], c["dtypes"], c["gname"], c["group"]) == ([[9]], ["float32"], "0", [0, 1, 2, 3]), c
        seqs = [c["seq"] for c in cs]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs  # the backend's numbers, one a call
    extra = got[3][-1]  # the call without a partner is rank 3's fourth, and it carries the user's line
    assert (extra["seq"], extra["site"], extra["via"]) == (
        res.diagnosis.seq, _site("ddp_uneven.py", "loss.backward()"), "backward()"), extra
    assert not any(e.get("lens") == "flight" for e in res.events if e.get("op") == "init_process_group")


def test_with_the_recorder_off_the_uneven_case_is_only_its_symptom(tmp_path, clean):
    """The lens is what names the cause: without it rank 3's trace holds no DDP collective at all."""
    p = run_cli("sandbox.run", "-n", "4", "--json", "--trace-dir", str(tmp_path), os.path.join(FW, "ddp_uneven.py"),
                env={flight.OFF: "0"}, timeout=RUN_TIMEOUT_S + 30)
    assert p.returncode == 1, p.stdout + p.stderr
    d = json.loads(p.stdout)["diagnosis"]
    # the old diagnosis: a symptom (rank 3's lost connection, or where a rank waits), whichever the timing gave
    assert d["kind"] != "uneven_steps" and "model.join()" not in d["summary"], d
    assert "ran more training steps" not in d["summary"] and "gradient_all_reduces" not in d["details"], d
    assert not [n for n in os.listdir(tmp_path) if flight.RUN_FILE.fullmatch(n)]  # no rank dumped a recorder


# ------------------------------------------------------------------------------------------ the other examples

def test_a_layer_used_on_rank_0_only_names_the_parameters_and_the_branch(clean):
    res = _run("ddp_unused.py")
    d = res.diagnosis
    branch = _site("ddp_unused.py", "if dist.get_rank() == 0:")
    assert res.verdict in ("error", "hang") and (d.kind, d.culprit_ranks, d.site) == (
        "unused_parameters", [0], branch), d.summary
    assert "extra.weight" in d.summary and "extra.bias" in d.summary, d.summary
    assert "got no gradient on ranks 1-3 but did on rank 0" in d.summary, d.summary
    assert f"`if dist.get_rank() == 0:` at {branch}" in d.summary, d.summary
    assert "find_unused_parameters=True" in d.summary, d.summary
    assert d.details["unused"] == {str(r): ["extra.weight", "extra.bias"] for r in (1, 2, 3)}, d.details


def test_a_model_built_wider_on_one_rank_is_named_at_ddps_construction_with_the_sizes(clean):
    res = _run("ddp_wider.py")
    d = res.diagnosis
    built = _site("ddp_wider.py", "model = DDP(")
    assert res.verdict in ("error", "hang") and (d.kind, d.culprit_ranks, d.site) == (
        "model_differs", [1], built), d.summary
    assert "rank 1 has [16, 8]; ranks 0, 2 and 3 have [8, 8]" in d.summary, d.summary
    assert d.summary.startswith("The ranks built different models"), d.summary  # the cause first, not a lost peer
    assert d.details["shapes"] == {"[16, 8]": [1], "[8, 8]": [0, 2, 3]}, d.details


def test_all_to_all_splits_that_disagree_are_named_as_the_pair(clean):
    res = _run("a2a_splits.py")
    d = res.diagnosis
    call = _site("a2a_splits.py", "dist.all_to_all_single(")
    assert res.verdict in ("crash", "error", "hang"), d.summary
    assert (d.kind, d.culprit_ranks, d.op, d.seq, d.site) == ("collective_mismatch", [2], "all_to_all_single", 1,
                                                              call), d.summary
    assert "rank 2 sends 3 elements to rank 0, which expects 2" in d.summary, d.summary
    assert "rank 2 sends 1 element to rank 1, which expects 2" in d.summary, d.summary
    assert "sends [3, 1, 2, 2]" in d.summary and d.details["differs_in"] == ["splits"], d.summary
    for w in res.warnings:  # a warning about the same call must not describe rank 2's call as a correct one
        if w.op == "all_to_all_single" and 2 in w.sites:
            assert "sends [3, 1, 2, 2]" in w.summary, w.summary


def test_ranks_that_completed_a_mismatched_all_reduce_are_said_to_hold_wrong_data(clean):
    res = _run("shape_mismatch.py")
    d = res.diagnosis
    call = _site("shape_mismatch.py", "dist.all_reduce(t)")
    assert res.verdict != "ok", d.summary
    assert (d.kind, d.culprit_ranks, d.seq, d.site) == ("collective_mismatch", [3], 1, call), d.summary
    assert d.details["differs_in"] == ["shape"] and d.details["wrong_data"] == [0, 1, 2], d.details
    assert "Ranks 0-2 completed this call against the others: what they hold from it is wrong." in d.summary, d.summary
    assert [r.error for r in res.ranks[:3]] == [None] * 3  # they raised nothing: only the lens says their data is bad


# ------------------------------------------------------------------------------------------ no false alarm

@pytest.mark.parametrize("name,n", [("ddp_correct.py", 4), ("fsdp2_correct.py", 2)])
def test_a_correct_loop_gives_no_warning_with_the_recorder_on(name, n, clean):
    res = _run(name, n)
    assert (res.verdict, res.diagnosis.kind) == ("ok", "none"), res.diagnosis.summary
    assert res.warnings == [], [w.summary for w in res.warnings]
    if name == "ddp_correct.py":  # the lens was on: DDP's three backward all_reduces on every rank reached the judge
        assert {r: len(cs) for r, cs in _flight_calls(res).items()} == {r: 3 for r in range(4)}


# ------------------------------------------------------------------------------------------ sandbox.flight, unit

MIXED = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(8, 1))
loss = model(torch.randn(4, 8)).pow(2).mean()
loss.backward()
t = torch.ones(4)
dist.all_reduce(t)
dist.destroy_process_group()
"""


def _line(text: str) -> int:
    return next(i for i, line in enumerate(MIXED.splitlines(), 1) if text in line)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A real 2-rank run of a DDP step then a Python all_reduce, its trace directory kept: (dir, script path)."""
    d = tmp_path_factory.mktemp("mixed")
    script = d / "mixed.py"
    script.write_text(MIXED)
    traces = d / "traces"
    res = run_script(str(script), world_size=2, trace_dir=str(traces), timeout=RUN_TIMEOUT_S)
    assert leftovers() == []
    assert res.verdict == "ok", res.diagnosis.summary
    return str(traces), str(script)


def test_calls_reads_a_real_gloo_dump_into_calls(mixed):
    traces, _ = mixed
    raw = pickle.load(open(os.path.join(traces, "fr-0.pkl"), "rb"))
    assert "gloo:all_reduce" in [e["profiling_name"] for e in raw["entries"]]  # what torch names it
    assert [e["frames"] for e in raw["entries"] if e.get("frames")] == []  # the sandbox's dumps leave frames out
    cs = flight.calls(flight.load(os.path.join(traces, "fr-0.pkl")), 0)
    reduces = [c for c in cs if c["op"] == "all_reduce"]
    assert [(c["shapes"], c["dtypes"]) for c in reduces] == [([[9]], ["float32"]), ([[4]], ["float32"])], cs
    assert [c["seq"] for c in cs] == list(range(1, len(cs) + 1))  # one group, numbered as the backend did
    assert all(c["gname"] == "0" and c["rank"] == 0 and c["lens"] == "flight" for c in cs)
    assert all(c["traced"] is None for c in cs)  # without frames: `merge` tells by the tracer's own calls


def test_the_dump_a_rank_leaves_at_its_end_holds_every_call_it_made_completed(mixed):
    """The last dump written is the one taken at the rank's end, with every call it made there and completed."""
    traces, _ = mixed
    for r, dump in sorted(flight.read_run(traces).items()):
        cs = flight.calls(dump, r)
        assert [c["shapes"] for c in cs if c["op"] == "all_reduce"] == [[[9]], [[4]]], (r, cs)
        assert [c["seq"] for c in cs if c["state"] != "completed"] == [], (r, cs, dump.get("pg_status"))


def test_a_group_count_left_behind_by_glooss_two_worker_threads_does_not_make_a_retired_call_unfinished(mixed):
    """gloo's two worker threads each write the group's last completed number after their call; one that runs late
    writes back an older number, and it stays behind until the next call (seen 9 times in 2000 calls under load). Its
    entry is retired all the same, and a correct rank must not read as stuck in its last collective. The real dump,
    with the count set back as the race leaves it."""
    traces, _ = mixed
    dump = flight.load(os.path.join(traces, "fr-0.pkl"))
    last = max(e["collective_seq_id"] for e in dump["entries"])
    assert all(e["retired"] for e in dump["entries"]), dump["entries"]
    raced = dict(dump, pg_status={g: dict(s, last_completed_collective=last - 1) for g, s in dump["pg_status"].items()})
    assert [c["seq"] for c in flight.calls(raced, 0) if c["state"] != "completed"] == []
    unretired = dict(raced, entries=[dict(e, retired=e["collective_seq_id"] != last) for e in dump["entries"]])
    assert [c["seq"] for c in flight.calls(unretired, 0) if c["state"] != "completed"] == [last]  # really unfinished


def _merged(traces):
    tracks = policy.fill_missing(load_dir(traces))
    dumps = flight.read_run(traces)
    assert sorted(dumps) == [0, 1]
    return tracks, dumps, flight_view.merge(tracks, dumps)


def test_merge_keeps_the_tracers_call_and_gives_it_the_backends_number(mixed):
    """The Python all_reduce is the tracer's call (traced): it stays as the tracer recorded it, not doubled, and takes
    the backend's sequence number, which counts DDP's collectives before it."""
    traces, _ = mixed
    tracks, dumps, merged = _merged(traces)
    for r in (0, 1):
        fr = {c["seq"]: c for c in flight.calls(dumps[r], r)}
        ours = [e for e in merged[r].events if e.get("ev") == "enter" and e.get("op") == "all_reduce"
                and e.get("lens") != "flight"]
        assert len(ours) == 1 and ours[0]["pyseq"] == 1, ours
        assert fr[ours[0]["seq"]]["shapes"] == [[4]] and ours[0]["seq"] == max(fr), (ours, fr)
        assert [e for e in merged[r].events if e.get("lens") == "flight" and e.get("shapes") == [[4]]] == []
    assert policy.judge(merged).verdict == "ok"
    assert all(e.get("lens") != "flight" for t in tracks.values() for e in t.events)  # the input is not modified


def test_merge_adds_every_call_ddp_made_in_its_constructor_and_its_backward(mixed):
    """DDP's calls (not traced: its constructor's shape check and broadcasts, its backward's all_reduce) join the
    rank's track as calls of the recorder's lens, each with its number and sizes."""
    traces, _ = mixed
    _, dumps, merged = _merged(traces)
    for r in (0, 1):
        ddps = [c for c in flight.calls(dumps[r], r) if c["shapes"] != [[4]]]
        added = [e for e in merged[r].events if e.get("lens") == "flight" and e.get("ev") == "enter"]
        assert [(e["op"], e["seq"], e["shapes"]) for e in added] == [(c["op"], c["seq"], c["shapes"]) for c in ddps]
        assert added[-1]["op"] == "all_reduce" and added[-1]["shapes"] == [[9]], added  # the backward's, last


def test_read_run_skips_a_torn_dump_and_find_takes_torchs_names(mixed, tmp_path):
    traces, _ = mixed
    for r in (0, 1):
        (tmp_path / f"nccl_trace_rank_{r}").write_bytes(open(os.path.join(traces, f"fr-{r}.pkl"), "rb").read())
    (tmp_path / "nccl_trace_rank_x").write_text("not a rank")
    assert flight.find(str(tmp_path)) == {r: str(tmp_path / f"nccl_trace_rank_{r}") for r in (0, 1)}
    assert flight.find(str(tmp_path), "rank_") == {}  # the whole name must match the prefix and a rank
    dumps = {r: flight.load(p) for r, p in flight.find(str(tmp_path)).items()}
    assert flight_offline.world_size(dumps) == 2 and flight_offline.world_size({0: dumps[0]}) == 2  # pg_config lists the ranks
    torn = tmp_path / "run"
    torn.mkdir()
    (torn / "fr-0.pkl").write_bytes(open(os.path.join(traces, "fr-0.pkl"), "rb").read())
    (torn / "fr-1.pkl").write_bytes(open(os.path.join(traces, "fr-1.pkl"), "rb").read()[:50])
    assert sorted(flight.read_run(str(torn))) == [0]


def _one_sentence(msg: str) -> None:
    assert "\n" not in msg.strip() and msg.strip().endswith("."), msg
    assert "Traceback" not in msg, msg


def test_load_refuses_a_file_that_is_not_a_dump_in_one_sentence(tmp_path):
    for name, data in (("notes.txt", b"hello, not a dump\n"), ("list.pkl", pickle.dumps([1, 2, 3]))):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(flight.FlightError) as e:
            flight.load(str(path))
        _one_sentence(str(e.value))
        assert str(path) in str(e.value) and "not a Flight Recorder dump" in str(e.value), e.value


def test_load_refuses_a_format_version_it_does_not_know_in_one_sentence(mixed, tmp_path):
    traces, _ = mixed
    dump = pickle.load(open(os.path.join(traces, "fr-0.pkl"), "rb"))
    dump["version"] = "3.0"
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(dump))
    with pytest.raises(flight.FlightError) as e:
        flight.load(str(path))
    _one_sentence(str(e.value))
    assert "3.0" in str(e.value) and str(path) in str(e.value), e.value
    p = run_cli("sandbox.diagnose", str(tmp_path))  # the command line says the same, and exits 2
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    _one_sentence(p.stderr)
    assert p.stderr.startswith("sandbox.diagnose: ") and "3.0" in p.stderr, p.stderr


def test_diagnose_on_a_directory_without_traces_or_dumps_exits_2_in_one_sentence(tmp_path):
    (tmp_path / "readme.txt").write_text("nothing here")
    p = run_cli("sandbox.diagnose", str(tmp_path))
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    _one_sentence(p.stderr)
    assert p.stderr.startswith("sandbox.diagnose: ") and "--prefix" in p.stderr, p.stderr


def test_diagnose_reads_dumps_under_another_prefix_and_says_a_correct_job_is_ok(mixed, tmp_path):
    traces, _ = mixed
    for r in (0, 1):
        (tmp_path / f"job_rank{r}").write_bytes(open(os.path.join(traces, f"fr-{r}.pkl"), "rb").read())
    assert run_cli("sandbox.diagnose", str(tmp_path)).returncode == 2  # not torch's default prefix
    p = run_cli("sandbox.diagnose", "--json", "--prefix", "job_rank", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    j = json.loads(p.stdout)
    assert (j["verdict"], j["world_size"], j["diagnosis"]["kind"]) == ("ok", 2, "none"), j
    assert j["warnings"] == [], j["warnings"]



def _uneven_reduce_scatter_then(ending):
    import torch
    import torch.distributed as dist
    r = dist.get_rank()
    out = torch.zeros(2 if r < 3 else 1)
    dist.reduce_scatter(out, [torch.ones(2), torch.ones(2), torch.ones(2), torch.ones(1)])  # 4 all_reduces in gloo
    dist.all_to_all_single(torch.zeros(4), torch.arange(4.0))
    if ending == "raise":
        raise ValueError("after the collectives")
    if r != 0:
        dist.barrier()
    return out.tolist()


def test_gloo_s_reduce_scatter_of_uneven_parts_is_one_call(clean):
    """Gloo runs a reduce_scatter of uneven parts as one all_reduce per part, which its Flight Recorder logs: they are
    parts of the tracer's call, not calls of their own (renumbered, they made the barrier rank 0 skips a 'mismatch'
    against an all_reduce), and the call is over when it returns (its Work never says it completed: an error raised
    after it was placed 'inside reduce_scatter')."""
    res = launch(_uneven_reduce_scatter_then, world_size=4, args=("barrier",), init=True)
    assert (res.diagnosis.kind, res.diagnosis.culprit_ranks) == ("missing_ranks", [0]), res.diagnosis.summary
    assert "barrier #3" in res.diagnosis.summary, res.diagnosis.summary
    res = launch(_uneven_reduce_scatter_then, world_size=4, args=("raise",), init=True)
    assert res.diagnosis.kind == "rank_error" and "inside" not in res.diagnosis.summary, res.diagnosis.summary
