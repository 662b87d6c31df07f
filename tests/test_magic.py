"""The `%%sandbox` cell magic in a real Jupyter kernel: code typed into a cell runs on 4 ranks, a deadlock is named
in the notebook, the result is left in `_sandbox`, --timeline shows a picture, a bad option is one sentence, and
Ctrl-C (a kernel interrupt) ends the run with the result shown and no traceback. `RunResult._repr_html_` is also
checked without a kernel: every piece of text is escaped and long outputs are capped. The magic on several simulated
nodes (`--nnodes 2 --nproc-per-node 2`, root only) runs in this process, as the kernel would run it, and so do its
refusals."""
from __future__ import annotations

import os
import queue
import textwrap
import time

import pytest
from conftest import KERNEL_PACKAGES, NOTEBOOK_PACKAGES, ROOT, execute_notebook, kernel, leftovers, need, wait_for

from sandbox import magic, nodes
from sandbox.result import Diagnosis, RankResult, RunResult

HANG = """\
%%sandbox -n 4
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4)
print("before the step")
if dist.get_rank() == 2:
    dist.broadcast(t, src=0)  # the odd one out
else:
    dist.all_reduce(t)
"""

OK = """\
%%sandbox -n 4 --timeline
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
print(f"rank {dist.get_rank()} has <{t.item():.0f}>")
dist.destroy_process_group()
"""


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))


def _html(cell) -> str:
    return "".join(o["data"]["text/html"] for o in cell.outputs
                   if o["output_type"] == "display_data" and "text/html" in o.get("data", {}))


def _stderr(cell) -> str:
    return "".join(o["text"] for o in cell.outputs if o["output_type"] == "stream" and o["name"] == "stderr")


def _stdout(cell) -> str:
    return "".join(o["text"] for o in cell.outputs if o["output_type"] == "stream" and o["name"] == "stdout")


@pytest.fixture
def no_kernel_left():
    yield
    assert leftovers() == []


def test_the_magic_in_a_notebook(no_kernel_left):
    need(*NOTEBOOK_PACKAGES)
    import nbformat

    cells = ["%load_ext sandbox", HANG, "print(_sandbox.verdict, _sandbox.diagnosis.kind, _sandbox.diagnosis.site)",
             OK, "import matplotlib\nprint(_sandbox.verdict, matplotlib.get_backend())", "%%sandbox -n zero\nprint('never')", "%%sandbox --hang-after -1\npass",
             "%%sandbox --nope\npass"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    execute_notebook(nb, ROOT, timeout=120, env=_env())  # raises on any cell that ends in an error: none may
    c = nb.cells

    hang = _html(c[1])
    assert "HANG [collective_mismatch]" in hang, hang
    assert "rank 2 calls broadcast" in hang
    assert "&lt;cell&gt;:8" in hang and "cell.py" not in hang  # the cell's own line numbers, no temp file
    assert hang.count("before the step") == 4  # every rank's output
    assert "image/png" not in str(c[1].outputs)
    assert _stdout(c[2]).split() == ["hang", "collective_mismatch", "<cell>:8"]

    ok = _html(c[3])
    assert "OK: 4 ranks" in ok, ok
    for r in range(4):
        assert f"rank {r} has &lt;4&gt;" in ok  # each rank's output, escaped
    pngs = [o for o in c[3].outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == 1
    assert _stdout(c[4]).split() == ["ok", "module://matplotlib_inline.backend_inline"]  # the notebook's plots still show

    for cell, words in ((c[5], "'zero' is not a whole number"), (c[6], "-1"), (c[7], "unrecognized arguments: --nope")):
        err = _stderr(cell)
        assert err.startswith("%%sandbox: ") and words in err, err
        assert err.count("\n") == 1 and "Traceback" not in err  # one sentence
        assert not _html(cell) and not _stdout(cell)


def test_ctrl_c_ends_the_run_and_shows_it(tmp_path, no_kernel_left):
    """The ranks sit in their own code (no hang the sandbox could name); the kernel is interrupted once they all
    started: the run ends, its result is shown with the verdict 'interrupted', and the cell ends without an error."""
    need(*KERNEL_PACKAGES)

    marker = tmp_path / "started"
    code = textwrap.dedent(f"""\
        %%sandbox -n 2
        import os, time
        import torch.distributed as dist
        dist.init_process_group("gloo")
        open(os.path.join({str(tmp_path)!r}, f"started-{{dist.get_rank()}}"), "w").close()
        time.sleep(60)
        """)
    with kernel(_env()) as (km, kc):
        kc.execute_interactive("%load_ext sandbox", timeout=60)
        msg_id = kc.execute(code)
        wait_for(lambda: all(os.path.exists(f"{marker}-{r}") for r in range(2)), "both ranks to start", 60)
        t0 = time.monotonic()
        km.interrupt_kernel()
        outputs = []
        while True:
            try:
                msg = kc.get_iopub_msg(timeout=30)
            except queue.Empty:
                raise AssertionError(f"the cell did not end after the interrupt; outputs so far: {outputs}") from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
            outputs.append(msg)
        assert time.monotonic() - t0 < 10
        reply = kc.get_shell_msg(timeout=30)
        assert reply["content"]["status"] == "ok", reply["content"]
        assert not [m for m in outputs if m["msg_type"] == "error"]
        html = "".join(m["content"]["data"].get("text/html", "") for m in outputs if m["msg_type"] == "display_data")
        assert "INTERRUPTED" in html, outputs
        left = []
        kc.execute_interactive("print(_sandbox.verdict)", timeout=30,
                               output_hook=lambda m: left.append(m["content"].get("text", "")))
        assert "".join(left).strip() == "interrupted"


# ------------------------------------------------------------------------------------------- the HTML, no kernel
def _result(output: str, summary: str = "Rank 1 raised <ValueError> & stopped.") -> RunResult:
    ranks = [RankResult(rank=0, outcome="ok", exit_code=0, output=output),
             RankResult(rank=1, outcome="error", exit_code=1,
                        error={"type": "ValueError", "message": "<b>", "site": "x.py:3"},
                        output="<script>alert(1)</script>\n")]
    return RunResult(verdict="error", world_size=2, wall_s=1.5,
                     diagnosis=Diagnosis(kind="rank_error", cause=summary, culprit_ranks=[1]), ranks=ranks)


def test_the_html_report_escapes_everything():
    html = _result("a < b & c\n")._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "Rank 1 raised &lt;ValueError&gt; &amp; stopped." in html
    assert "a &lt; b &amp; c" in html and "x.py:3" in html
    assert html.index("ERROR [rank_error]") < html.index("Rank 1 raised") < html.index("<table")
    assert "<style" not in html and "<link" not in html and "http" not in html  # self-contained


def test_the_html_report_caps_each_rank_output_like_the_terminal():
    html = _result("".join(f"line {i}\n" for i in range(250)))._repr_html_()
    assert "50 earlier lines" in html
    assert "line 49\n" not in html and "line 50\n" in html and "line 249" in html


# ------------------------------------------------------------------------------------------- several nodes
WHERE = """\
import os, socket
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)  # the ranks of both nodes really talk
print("WHERE", socket.gethostname(), os.environ["RANK"], os.environ["LOCAL_RANK"], int(t.item()), flush=True)
dist.destroy_process_group()
"""


def test_the_magic_on_two_nodes(clean, capsys):
    ok, why = nodes.available()
    if not ok:
        pytest.skip(why)
    res = magic.run_cell("--nnodes 2 --nproc-per-node 2", WHERE)
    assert res is not None and res.ok, capsys.readouterr()
    where = [[w.split()[1:] for w in r.output.splitlines() if w.startswith("WHERE ")] for r in res.ranks]
    # ranks 0-1 on node0, 2-3 on node1, local ranks 0-1 on each; the sum is the world's size
    assert where == [[["node0", "0", "0", "4"]], [["node0", "1", "1", "4"]], [["node1", "2", "0", "4"]],
                     [["node1", "3", "1", "4"]]], where
    shown = capsys.readouterr().out
    assert shown.startswith("OK: 4 ranks in"), shown
    assert "0 (node0)" in shown and "3 (node1)" in shown  # the report names each rank's node


@pytest.mark.parametrize("line, words", [
    ("-n 4 --nnodes 2", "-n is the number of ranks on one node: with --nnodes give --nproc-per-node instead"),
    ("-n 2 --nproc-per-node 2", "-n is the number of ranks on one node: with --nnodes give --nproc-per-node instead"),
    ("--nnodes 0", "argument --nnodes: 0 must be at least 1"),
    ("--nnodes 2 --nproc-per-node 3 --nproc-per-node x", "argument --nproc-per-node: 'x' is not a whole number"),
])
def test_bad_node_options_are_one_sentence(capsys, monkeypatch, line, words):
    def no_run(*args, **kwargs):
        raise AssertionError("a rank was started after a bad option")

    monkeypatch.setattr("sandbox.launcher.run_script", no_run)
    assert magic.run_cell(line, "print('never')\n") is None
    out = capsys.readouterr()
    assert out.err.startswith("%%sandbox: ") and words in out.err, out.err
    assert out.err.count("\n") == 1 and out.out == ""


def test_nodes_without_privileges_are_one_sentence(capsys, monkeypatch):
    why = "simulated nodes need root (network namespaces and a bridge): run as root, e.g. in a container."
    monkeypatch.setattr(nodes, "available", lambda: (False, why))  # as on a machine without root
    assert magic.run_cell("--nnodes 2 --nproc-per-node 2", "print('never')\n") is None
    out = capsys.readouterr()
    assert out.err == f"%%sandbox: {why}\n" and out.out == ""
