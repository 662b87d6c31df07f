"""The launch API from a script, from pytest, and from a real Jupyter kernel."""
import os
import subprocess
import sys
import textwrap

import pytest

import scenarios
from conftest import ROOT, run_in_kernel
from sandbox import UsageError, launch


def test_values_output_and_kwargs(clean):
    res = launch(scenarios.prints_and_returns, world_size=3, args=(7,))
    assert res.ok and res.values == [0, 7, 14]
    assert [r.output.strip() for r in res.ranks] == ["hello from 0", "hello from 1", "hello from 2"]


def test_init_true_creates_and_destroys_the_group(clean):
    res = launch(scenarios.env_view, world_size=2, init=True)
    assert res.ok
    ops = [e["op"] for e in res.events if e["ev"] == "enter" and e["rank"] == 0]
    assert ops == ["init_process_group", "destroy_process_group"]
    assert res.values[1]["RANK"] == "1" and res.values[1]["WORLD_SIZE"] == "2"


def test_object_and_async_calls_are_traced(clean):
    res = launch(scenarios.object_collectives, world_size=3)
    assert res.ok, res.diagnosis.summary
    assert res.values[0] == ([0, 1, 2], 0, [0, 1, 2])
    ops = [e["op"] for e in res.events if e["ev"] == "enter" and e["rank"] == 1]
    # nested calls (gather_object runs all_gather/gather inside) are not recorded twice
    assert ops == ["init_process_group", "all_gather_object", "broadcast_object_list", "gather_object",
                   "monitored_barrier", "destroy_process_group"]
    seqs = [e["seq"] for e in res.events if e["ev"] == "enter" and e["rank"] == 1 and "seq" in e]
    assert seqs == [0, 1, 2, 3, 4]
    res = launch(scenarios.p2p_fixed, world_size=2)
    assert res.ok and res.values == [1.0, 0.0]
    assert res.warnings == [], [w.summary for w in res.warnings]  # every isend, irecv and batch op was waited on
    r0 = [e for e in res.events if e["ev"] == "enter" and e["rank"] == 0]
    assert [e["op"] for e in r0[1:]] == ["isend", "irecv", "wait", "wait", "batch_isend_irecv", "wait", "wait",
                                         "destroy_process_group"]
    waits = [e for e in r0 if e["op"] == "wait"]
    assert [(w["of"], w["peer"]) for w in waits] == [("isend", 1), ("irecv", 1), ("isend", 1), ("irecv", 1)]
    assert all(w["site"].startswith("tests/scenarios.py:") for w in r0)


def test_events_carry_the_call_details(clean):
    res = launch(scenarios.async_collective, world_size=2)
    assert res.ok
    enter = next(e for e in res.events if e["ev"] == "enter" and e["op"] == "all_gather" and e["rank"] == 1)
    assert enter["group"] == [0, 1] and enter["seq"] == 2 and enter["shapes"] == [[3]]
    assert enter["dtypes"] == ["float32"] and enter["devices"] == ["cpu"] and enter["func"] == "async_collective"
    init = next(e for e in res.events if e.get("op") == "init_process_group" and e["rank"] == 0)
    assert init["backend"] == "gloo" and init["init_method"] == "env://" and init["MASTER_ADDR"] == "127.0.0.1"
    assert init["endpoint"] == f"127.0.0.1:{init['MASTER_PORT']}"


def test_bad_targets_are_usage_errors():
    with pytest.raises(UsageError, match="needs a function"):
        launch(42, world_size=2)
    import threading
    lock = threading.Lock()
    with pytest.raises(UsageError, match="cannot be sent to the ranks"):
        launch(lambda: lock, world_size=2)  # a closure over something that cannot leave this process
    with pytest.raises(UsageError, match="at least 1"):
        launch(scenarios.ok_sum, world_size=0)
    with pytest.raises(UsageError, match="positive"):
        launch(scenarios.ok_sum, world_size=2, timeout=-1)


def test_from_a_script(tmp_path, clean):
    script = tmp_path / "drive.py"
    script.write_text(textwrap.dedent("""
        from dataclasses import dataclass

        import torch.distributed as dist
        from sandbox import launch

        @dataclass
        class Cfg:
            scale: int

        @dataclass
        class Out:
            value: int

        def work(cfg):
            dist.init_process_group("gloo")
            dist.barrier()
            return Out(dist.get_rank() * cfg.scale)

        if __name__ == "__main__":
            res = launch(work, world_size=3, args=(Cfg(10),))
            print(res.verdict, [o.value for o in res.values])
    """))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.stdout.strip() == "ok [0, 10, 20]", p.stderr


def test_from_a_jupyter_kernel(clean):
    text = run_in_kernel("import scenarios\nfrom sandbox import launch\n"
                         "ok = launch(scenarios.ok_sum, world_size=2)\n"
                         "bad = launch(scenarios.send_cycle, world_size=2)\n"
                         "print(ok.verdict, ok.values[0], bad.verdict, bad.diagnosis.kind)", timeout=90)
    assert text.strip() == "ok [3.0, 3.0, 3.0] hang p2p_cycle"


def test_a_function_sent_by_value_is_placed_in_the_file_it_was_written_in(clean):
    """cloudpickle names every function it sends by value "<dynamic-code>"; a site says where it was written: its
    file for a closure in a module, "<cell>" for code typed into Jupyter."""
    import torch.distributed  # noqa: F401  (the closure's body needs it in the ranks only)

    def stuck():
        import torch
        import torch.distributed as dist
        if dist.get_rank() == 0:
            dist.all_reduce(torch.ones(1))
        dist.barrier()

    res = launch(stuck, world_size=2, init=True)
    assert res.verdict == "hang", res.diagnosis.summary
    assert "tests/test_api.py:" in res.diagnosis.summary and "<dynamic-code>" not in res.diagnosis.summary
    from sandbox import _paths
    cell = {}
    exec(compile("def f():\n    return 1\n", "/tmp/ipykernel_4242/1234.py", "exec"), cell)
    assert _paths.code_file(cell["f"]) == "<cell>"
    assert _paths.code_file(print) is None
