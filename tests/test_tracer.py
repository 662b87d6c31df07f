"""The tracer: what it records for calls made the way real code makes them, and that it never gets in the way
(threads, its own failures, errors, uninstalling). Rank programs are in scenarios_tracer.py."""
import inspect
import os

import scenarios_tracer as sc
from sandbox import launch

W = [0, 1, 2]


def _enters(res, rank):
    """The tracer's own enter events of a rank (not the calls the Flight Recorder lens added)."""
    return [e for e in res.events if e["ev"] == "enter" and e["rank"] == rank and e.get("lens") != "flight"]


def _expected_positional(rank):
    """(op, group, fields) of every enter event of a rank of scenarios_tracer.positional, in order."""
    G = sc.SUB
    exp = [("init_process_group", W, {"seq": 0}), ("new_group", None, {}),
           ("broadcast", W, {"root": 0, "seq": 1, "shapes": [[4]]})]
    if rank in G:
        other = 3 - rank
        exp += [
            ("broadcast", G, {"root": 2, "seq": 1, "shapes": [[4]]}),
            ("barrier", G, {"seq": 2}),
            ("all_reduce", G, {"seq": 3, "shapes": [[4]], "redop": "SUM"}),
            ("reduce", G, {"root": 1, "seq": 4, "shapes": [[4]], "redop": "SUM"}),
            ("all_gather", G, {"seq": 5, "shapes": [[4]]}),
            ("gather", G, {"root": 1, "seq": 6, "shapes": [[4]]}),
            ("scatter", G, {"root": 2, "seq": 7, "shapes": [[2]]}),
            ("all_to_all_single", G, {"seq": 8, "shapes": [[4]], "splits": [[2, 2], [2, 2]]}),
            ("broadcast_object_list", G, {"root": 2, "seq": 9}),
            ("gather_object", G, {"root": 1, "seq": 10}),
            ("all_gather_object", G, {"seq": 11}),
            ("scatter_object_list", G, {"root": 2, "seq": 12}),
            ("broadcast", G, {"root": 2, "seq": 13, "shapes": [[4]]}),  # group_src=1 is global rank 2
            ("monitored_barrier", G, {"seq": 14}),
            ("all_reduce", G, {"seq": 15, "shapes": [[4]], "async": True, "redop": "SUM"}),
            ("wait", G, {"seq": 15, "of": "all_reduce", "shapes": [[4]], "redop": "SUM"}),  # what must match, copied
        ]
        send = rank == 1
        exp += [
            ("isend" if send else "irecv", G, {"peer": other, "tag": 7, "async": True, "shapes": [[4]]}),
            ("wait", G, {"peer": other, "of": "isend" if send else "irecv"}),
            ("send" if send else "recv", W, {"peer": other, "tag": 3, "shapes": [[4]]}),
            ("send_object_list" if send else "recv_object_list", G, {"peer": other}),
        ]
    exp += [("barrier", W, {"seq": 2}), ("destroy_process_group", None, {})]
    return exp


def test_positional_arguments_are_recorded_like_keywords(clean):
    res = launch(sc.positional, world_size=3)
    assert res.verdict == "ok", res.diagnosis.summary
    sub_name = {e["rank"]: e["gname"] for e in res.events if e["ev"] == "exit" and e.get("op") == "new_group"}
    world_name = next(e["gname"] for e in res.events if e["ev"] == "enter" and e["op"] == "init_process_group")
    assert sub_name[0] is None and sub_name[1] == sub_name[2] != world_name  # rank 0 is not in the subgroup
    for rank in W:
        got = _enters(res, rank)
        exp = _expected_positional(rank)
        assert [e["op"] for e in got] == [op for op, _, _ in exp], rank
        for e, (op, group, fields) in zip(got, exp):
            where = f"rank {rank} {op} at {e['site']}"
            assert e["site"].startswith("tests/scenarios_tracer.py:"), where
            if group is not None:
                assert e["group"] == group, where
                assert e["gname"] == (world_name if group == W else sub_name[rank]), where
            for k in ("root", "peer", "seq", "tag", "of", "redop", "splits"):
                assert e.get(k) == fields.get(k), f"{where}: {k} {e.get(k)!r}, expected {fields.get(k)!r}"
            assert e.get("async", False) == fields.get("async", False), where
            if "shapes" in fields:
                assert e["shapes"] == fields["shapes"] and e["dtypes"] == ["float32"] * len(fields["shapes"]), where


def test_the_table_names_arguments_this_torch_has():
    """Every argument name OPS gives exists in the signature of the function it describes (read as install does)."""
    from torch.distributed import distributed_c10d as c10d

    from sandbox import trace

    for name, op in trace.OPS.items():
        fn = getattr(c10d, name, None)
        if fn is None:  # an op this torch does not have is simply not wrapped
            continue
        params = inspect.signature(fn).parameters
        named = (op.data, op.root, op.root and "group_" + op.root, op.redop, op.out, *(op.objects or ()))
        for arg in filter(None, named):
            assert arg in params, f"{name} has no argument {arg!r}: {list(params)}"
        if op.kind in ("coll", "p2p") and name != "batch_isend_irecv":
            assert "group" in params, name


def test_uninstall_restores_the_originals():
    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from sandbox import trace

    Work = torch._C._distributed_c10d.Work
    names = [n for n in trace.OPS if hasattr(c10d, n)]
    before = {n: getattr(c10d, n) for n in names}
    before_dist = {n: getattr(dist, n) for n in names if hasattr(dist, n)}
    raw_wait = vars(Work)["wait"]
    assert not any(hasattr(f, "__sandbox_traced__") for f in before.values())
    trace.install()
    trace.install()  # idempotent: wraps once
    try:
        for n in names:
            assert getattr(c10d, n).__sandbox_traced__ is before[n], n
        for n in before_dist:
            assert getattr(dist, n) is getattr(c10d, n), n
        assert vars(Work)["wait"] is not raw_wait and hasattr(Work.wait, "__sandbox_traced__")
    finally:
        trace.uninstall()
    trace.uninstall()  # idempotent
    assert {n: getattr(c10d, n) for n in names} == before
    assert {n: getattr(dist, n) for n in before_dist} == before_dist
    assert dist.all_reduce is c10d.all_reduce is before["all_reduce"]
    assert vars(Work)["wait"] is raw_wait
    trace.install()  # and again after an uninstall
    try:
        assert dist.all_reduce.__sandbox_traced__ is before["all_reduce"]
    finally:
        trace.uninstall()
    assert dist.all_reduce is before["all_reduce"] and vars(Work)["wait"] is raw_wait


def test_uninstall_inside_a_rank(clean):
    res = launch(sc.uninstalled, world_size=2)
    assert res.verdict == "ok", res.diagnosis.summary
    assert res.values == [(True, True, [8.0, 8.0])] * 2  # 3 all_reduces of ones on 2 ranks: 2 ** 3
    for rank in (0, 1):
        got = _enters(res, rank)
        assert [e["op"] for e in got] == ["init_process_group", "all_reduce", "destroy_process_group"]
        assert got[1].get("pyseq", got[1]["seq"]) == 1  # the tracer did not count the untraced calls
        # the Flight Recorder saw them: the backend's numbering puts the traced call third
        seen = [e for e in res.events if e["ev"] == "enter" and e["rank"] == rank and e.get("lens") == "flight"]
        assert [(e["op"], e["seq"]) for e in seen] == [("all_reduce", 1), ("all_reduce", 2)]
        assert got[1]["seq"] == 3


def test_call_ids_are_unique_across_threads(clean):
    calls = 300
    res = launch(sc.two_threads, world_size=2, args=(calls,))
    assert res.verdict == "ok", res.diagnosis.summary
    for rank in (0, 1):
        got = _enters(res, rank)
        ids = [e["id"] for e in got]
        assert len(ids) == len(set(ids)), f"rank {rank}: {len(ids) - len(set(ids))} duplicate call ids"
        assert ids == sorted(ids)  # an id and its line are written together: the file is in id order
        exits = {e["id"] for e in res.events if e["ev"] == "exit" and e["rank"] == rank}
        assert set(ids) <= exits  # every call finished, and every exit names its own call
        seqs = {}
        for e in got:
            if e["op"] == "all_reduce":
                seqs.setdefault(e["gname"], []).append(e["seq"])
        assert sorted(map(sorted, seqs.values())) == [list(range(1, calls + 1))] * 2


def test_a_failure_of_the_tracer_bookkeeping_still_writes_the_exit(clean):
    res = launch(sc.bookkeeping_fails, world_size=2, hang_after=0.5)
    assert res.verdict == "ok", res.diagnosis.summary
    assert res.values == [[1.0, 1.0], [1.0, 1.0]]
    for rank, op, after in ((0, "recv", ["tracer_error"]), (1, "send", [])):
        call = next(e for e in _enters(res, rank) if e["op"] == op)
        mine = [e for e in res.events if e["rank"] == rank and e.get("id") == call["id"]]
        assert [e["ev"] for e in mine] == ["enter", "exit", *after]
        assert "error" not in mine[1] and all("planted" in e["error"] for e in mine[2:])


def _assert_user_traceback(text, *wanted):
    assert "Traceback (most recent call last)" in text
    for frame in ("sandbox/trace/", "sandbox/rank.py", "runpy"):
        assert frame not in text, text
    for w in wanted:
        assert w in text, text


def test_tracebacks_show_the_users_frames_not_the_tracers(clean):
    res = launch(sc.error_in_call, world_size=2)
    assert res.verdict == "error"
    for r in res.ranks:
        end = next(e for e in res.events if e["ev"] == "end" and e["rank"] == r.rank)
        for text in (r.output, end["error"]["traceback"]):
            _assert_user_traceback(text, 'scenarios_tracer.py", line', "in error_in_call",
                                   "dist.all_reduce([1.0, 2.0])", "The above exception was the direct cause",
                                   "summing the losses failed",
                                   "distributed_c10d.py")  # torch's own frames stay: Python would show them
    res = launch(sc.error_in_wait, world_size=2)
    assert res.verdict == "error", res.diagnosis.summary
    r0 = res.ranks[0]
    end = next(e for e in res.events if e["ev"] == "end" and e["rank"] == 0)
    for text in (r0.output, end["error"]["traceback"]):
        _assert_user_traceback(text, "in error_in_wait", "dist.irecv(torch.zeros(1), 1).wait()")


def test_a_rank_that_cannot_start_its_trace_says_why(tmp_path, clean):
    # a dangling link where rank 1's trace file goes: trace.start cannot create it (the sandbox leaves links alone)
    os.symlink(tmp_path / "missing" / "rank-1.jsonl", tmp_path / "rank-1.jsonl")
    res = launch(sc.returns_rank, world_size=2, trace_dir=str(tmp_path))
    assert res.values[0] == 0
    r1 = res.ranks[1]
    assert r1.exit_code == 70
    assert "sandbox: rank 1 failed outside its own code" in r1.output
    assert "FileNotFoundError" in r1.output and "in start" in r1.output, r1.output


def test_a_rank_that_cannot_open_its_log_says_why_in_the_zygote_log(tmp_path, clean):
    os.symlink(tmp_path / "missing" / "rank-1.log", tmp_path / "rank-1.log")
    res = launch(sc.returns_rank, world_size=2, trace_dir=str(tmp_path))
    assert res.values[0] == 0 and res.ranks[1].exit_code == 70
    zlog = (tmp_path / "zygote.log").read_text()
    assert "sandbox: rank 1 failed outside its own code" in zlog and "FileNotFoundError" in zlog, zlog
    assert "rank-1.log" in zlog
    assert "sandbox: rank 1 failed outside its own code" in res.ranks[1].output  # the launcher shows it


def optimizer_steps():
    """Two optimizers on rank 0's and rank 1's own parameters: Adam over 10 numbers (3 steps), SGD with momentum over
    a 2 x 3 matrix (1 step), and an Adam step while the tracer is paused, which must leave no trace."""
    import torch

    from sandbox import trace

    a = torch.nn.Parameter(torch.zeros(10))
    b = torch.nn.Parameter(torch.zeros(2, 3))
    adam, sgd = torch.optim.Adam([a], lr=0.1), torch.optim.SGD([b], lr=0.1, momentum=0.9)
    for _ in range(3):
        a.grad = torch.ones(10)
        adam.step()
    b.grad = torch.ones(2, 3)
    sgd.step()
    with trace.paused():
        adam.step()
    return a.detach().tolist()[0]


def test_every_optimizer_step_is_an_event_with_what_it_steps_and_holds(clean):
    res = launch(optimizer_steps, world_size=2)
    assert res.verdict == "ok", res.diagnosis.summary
    for rank in (0, 1):
        got = [e for e in res.events if e["ev"] == "optim" and e["rank"] == rank]
        assert [(e["op"], e["params"], e["state"], e["state_bytes"]) for e in got] == [
            ("Adam", 10, 20, 80)] * 3 + [("SGD", 6, 6, 24)], got  # Adam: two moments; SGD: one momentum buffer
        assert all(e["site"].startswith("tests/test_tracer.py:") and e["func"] == "optimizer_steps" for e in got)


def test_uninstall_takes_the_optimizer_hook_off_too():
    import torch
    from torch.optim.optimizer import _global_optimizer_post_hooks

    from sandbox import trace

    before = dict(_global_optimizer_post_hooks)
    trace.install()
    try:
        assert len(_global_optimizer_post_hooks) == len(before) + 1
        with trace.paused():
            assert dict(_global_optimizer_post_hooks) == before
        assert len(_global_optimizer_post_hooks) == len(before) + 1
    finally:
        trace.uninstall()
    assert dict(_global_optimizer_post_hooks) == before
    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1).step()  # no hook of ours left to call
