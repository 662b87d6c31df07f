"""The timeline picture: the calls get the width (the script's start-up is said, not drawn) and no two labels
overlap, on a real hang and on the cases that broke it (a call stuck at the very end, two stuck calls on one rank)."""
import textwrap

import pytest
from matplotlib.transforms import Bbox

from sandbox import run_script
from sandbox.report import picture, timeline
from sandbox.result import Diagnosis, RankResult, RunResult

STARTUP_S = 1.5
# A start-up of its own (imports, building a model) before the first call, then a mismatch: rank 0 skips a
# barrier the others wait in, late in the run.
SCRIPT = textwrap.dedent(f"""
    import time
    import torch
    import torch.distributed as dist

    time.sleep({STARTUP_S})
    dist.init_process_group("gloo")
    t = torch.ones(4)
    for step in range(3):
        dist.all_reduce(t)
        if dist.get_rank() != 0 or step < 2:
            dist.barrier()
    dist.all_reduce(t)
""")


def _labels(fig) -> list:
    """Every piece of text the picture shows: titles, tick labels of both sides, the stuck calls, the legend."""
    ax = fig.axes[0]
    outcomes = ax.child_axes[0]
    texts = [ax.title, ax.xaxis.label, *ax.get_yticklabels(), *ax.get_xticklabels(), *outcomes.get_yticklabels(),
             *ax.texts]
    for legend in fig.legends:
        texts += legend.get_texts()
    return [t for t in texts if t.get_visible() and t.get_text()]


def _box(t) -> Bbox:
    box = t.get_window_extent()
    patch = t.get_bbox_patch()
    return Bbox.union([box, patch.get_window_extent()]) if patch is not None else box


def overlaps(fig) -> list[tuple[str, str]]:
    """The pairs of labels whose boxes intersect (touching edges do not count), as drawn."""
    fig.draw_without_rendering()
    boxes = [(t.get_text(), _box(t)) for t in _labels(fig)]
    bad = []
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1:]:
            inter = Bbox.intersection(ba, bb)
            if inter is not None and inter.width > 0.5 and inter.height > 0.5:
                bad.append((a, b))
    return bad


def outside_the_plot(fig) -> list[str]:
    fig.draw_without_rendering()
    ax = fig.axes[0]
    frame = ax.get_window_extent()
    return [t.get_text() for t in ax.texts if not (frame.x0 - 1 <= _box(t).x0 and _box(t).x1 <= frame.x1 + 1)]


def calls_share(fig, res) -> float:
    """How much of the x-axis the time from the first call to the run's end takes."""
    calls = [e["t"] for e in res.events if e["ev"] in ("enter", "exit", "done")]
    first, last = min(calls), max(max(calls), res.ended_at or 0)
    lo, hi = fig.axes[0].get_xlim()
    return (last - first) / (hi - lo)


@pytest.fixture(scope="module")
def hang(tmp_path_factory):
    script = tmp_path_factory.mktemp("timeline") / "late_barrier.py"
    script.write_text(SCRIPT)
    res = run_script(str(script), world_size=4)
    assert res.verdict == "hang" and res.ranks[0].pending["op"] == "all_reduce", res.text()
    return res


def test_a_real_hang_gives_the_calls_the_width_and_says_the_start_up(hang, tmp_path):
    fig = picture.draw(hang)
    assert calls_share(fig, hang) > 0.9
    label = fig.axes[0].get_xlabel()
    startup = float(label.split("start-up before it, ")[1].split(" s")[0])
    assert STARTUP_S <= startup < STARTUP_S + 1.5, label
    assert overlaps(fig) == [] and outside_the_plot(fig) == []
    # rank 0 is ended first; a rank whose barrier raised "connection closed" as it went is no longer stuck in it
    stuck = [t.get_text() for t in fig.axes[0].texts]
    assert "stuck: all_reduce #6" in stuck and set(stuck) <= {"stuck: all_reduce #6", "stuck: barrier #6"}
    outcomes = [t.get_text() for t in fig.axes[0].child_axes[0].get_yticklabels()]
    assert outcomes == [str(r.outcome) for r in hang.ranks] and outcomes[0] == "hung"
    path = timeline(hang, str(tmp_path / "t.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def _synthetic(stuck_at: float) -> RunResult:
    """Two ranks that started at 0 s, made their first call at 3 s, and got stuck at `stuck_at` until the run was
    ended at 5 s: rank 0 in a barrier, rank 1 in a recv after an isend it never waited on."""
    ev = [{"ev": "hello", "rank": r, "t": 0.0} for r in (0, 1)]
    for r in (0, 1):
        ev += [{"ev": "enter", "rank": r, "id": 1, "op": "init_process_group", "t": 3.0},
               {"ev": "exit", "rank": r, "id": 1, "op": "init_process_group", "t": 3.1}]
    ev += [{"ev": "enter", "rank": 0, "id": 2, "op": "barrier", "seq": 3, "t": stuck_at},
           {"ev": "enter", "rank": 1, "id": 2, "op": "isend", "peer": 0, "t": stuck_at - 0.02},
           {"ev": "enter", "rank": 1, "id": 3, "op": "recv", "peer": 0, "t": stuck_at}]
    ranks = [RankResult(rank=0, outcome="hung"), RankResult(rank=1, outcome="hung")]
    return RunResult(verdict="hang", world_size=2, wall_s=5.2, diagnosis=Diagnosis(kind="none", cause="stuck"),
                     ranks=ranks, events=ev, ended_at=5.0)


@pytest.mark.parametrize("stuck_at", [3.5, 4.97])
def test_labels_never_overlap_even_for_a_call_stuck_at_the_very_end(stuck_at):
    res = _synthetic(stuck_at)
    fig = picture.draw(res)
    assert overlaps(fig) == [] and outside_the_plot(fig) == []
    assert sorted(t.get_text() for t in fig.axes[0].texts) == ["stuck: barrier #3", "stuck: isend peer 0, recv peer 0"]
    assert calls_share(fig, res) > 0.9
    assert "start-up before it, 3.00 s" in fig.axes[0].get_xlabel()


def test_the_picture_checks_can_fail():
    res = _synthetic(4.97)
    fig = picture.draw(res)
    ax = fig.axes[0]
    # a label drawn where the old picture put the outcome: on the stuck call's label, at the end of the row
    ax.text(2.0, 0, "  hung", va="center", fontsize=9)
    assert ("stuck: barrier #3", "  hung") in overlaps(fig)
    barrier = next(t for t in ax.texts if t.get_text() == "stuck: barrier #3")
    barrier.set_x(2.3)
    assert "stuck: barrier #3" in outside_the_plot(fig)
    ax.set_xlim(-3.0, 2.1)  # the old axis, from the ranks' start: the start-up takes most of the width
    assert calls_share(fig, res) < 0.5


def test_a_run_without_calls_has_no_timeline():
    res = RunResult(verdict="ok", world_size=1, wall_s=0.1, diagnosis=Diagnosis(kind="none", cause="ok"),
                    ranks=[RankResult(rank=0, outcome="ok")], events=[{"ev": "hello", "rank": 0, "t": 1.0}])
    with pytest.raises(ValueError, match="no distributed calls"):
        picture.draw(res)


def test_a_build_it_run_shows_its_backward_and_optimizer_steps_beside_its_calls(clean):
    """Lab 22's bucketed data parallelism: each rank's backward (the check's notes) and optimizer steps (the
    tracer's `optim` events, started and ended) are drawn as compute strips; the buckets' all_reduces start inside
    the backward strip, which is the lesson of the picture."""
    from sandbox import lab
    from sandbox.course import data_parallel as dp

    c = lab.check(dp.bucketed, n=2, reference=dp.reference, rules=[dp.OVERLAP], show=False)
    assert c.ok, c.message
    done = picture.compute(c.result.events)
    for kind in ("backward", "optimizer step"):
        assert sorted({r for r, _, _ in done[kind]}) == [0, 1], kind
        assert all(a <= b for _, a, b in done[kind]), kind
    steps = [e for e in c.result.events if e.get("ev") == "optim"]
    assert steps and all(e["start"] <= e["t"] for e in steps)
    started = [e["t"] for e in c.result.events if e.get("ev") == "enter" and e.get("op") == "all_reduce"
               and e.get("rank") == 0]
    assert any(a <= t <= b for t in started for r, a, b in done["backward"] if r == 0)
    fig = picture.draw(c.result)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "backward (compute)" in legend and "optimizer step (compute)" in legend
    assert overlaps(fig) == []
