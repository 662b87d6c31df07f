"""The Concepts page's pictures are held to real runs: one launch of every primitive and of a ring all-reduce on 4
gloo ranks (`sandbox.course.collectives`), compared with what one process computes each primitive must produce
(written here, apart from the code that runs and draws them); the ring's every step compared with a single-process
ring and its end with `dist.all_reduce`; and every picture drawn from exactly that record, as a PNG that is not
blank."""
import importlib.util
import os

import numpy as np
import pytest

from sandbox.course import collectives
from sandbox.report import diagrams

N = collectives.WORLD
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def recorded():
    return collectives.run(timeout=120)


# ------------------------------------------------------------------------------- the single-process reference

def _inputs(chunks):
    """What each rank starts with, as plain ints: the same encoding the ranks use."""
    return [[collectives.origin_value(r, c) for c in range(chunks)] for r in range(N)]


def reference() -> dict:
    """{primitive: (before, after)} per rank, as lists of ints, computed in one process; None where the contract
    leaves the value unspecified."""
    one, four = _inputs(1), _inputs(collectives.CHUNKS)
    total = [sum(one[r][0] for r in range(N))]
    out = {
        "broadcast": (one, [one[0]] * N),
        "reduce": (one, [total] + [None] * (N - 1)),
        "all_reduce": (one, [total] * N),
        "gather": (one, [[one[r][0] for r in range(N)]] + one[1:]),
        "all_gather": (one, [[one[r][0] for r in range(N)]] * N),
        "reduce_scatter": (four, [[sum(four[r][i] for r in range(N))] for i in range(N)]),
        "scatter": ([four[0]] + [[0]] * (N - 1), [[four[0][i]] for i in range(N)]),
        "all_to_all": (four, [[four[j][i] for j in range(N)] for i in range(N)]),
        "barrier": (one, one),
        "send_recv": (one, [one[0], one[0], one[2], one[3]]),
    }
    return {k: ([[collectives.origins(v) for v in rank] for rank in before],
                [None if rank is None else [collectives.origins(v) for v in rank] for rank in after])
            for k, (before, after) in out.items()}


def mismatches(data: dict) -> list[str]:
    """Where a record differs from the reference: one line per rank and side that does not match."""
    ref, bad = reference(), []
    if [p["name"] for p in data["primitives"]] != list(ref):
        bad.append(f"primitives {[p['name'] for p in data['primitives']]}, expected {list(ref)}")
    for p in data["primitives"]:
        want_before, want_after = ref.get(p["name"], ([], []))
        for side, want in (("before", want_before), ("after", want_after)):
            for r in range(N):
                if want[r] is None:  # unspecified by the contract: the record must say so
                    if r not in p["unspecified"]:
                        bad.append(f"{p['name']} rank {r}: unspecified, but not marked so")
                elif p[side][r] != want[r]:
                    bad.append(f"{p['name']} {side} rank {r}: {p[side][r]}, expected {want[r]}")
    return bad


def ring_reference() -> list[list[list[int]]]:
    """A ring all-reduce in one process: what every rank holds after each of its 2(N-1) steps (ints)."""
    held = _inputs(N)
    states = []
    for phase in ("reduce-scatter", "all-gather"):
        for s in range(N - 1):
            first = 0 if phase == "reduce-scatter" else 1
            sent = [held[r][(r + first - s) % N] for r in range(N)]  # everyone sends before anyone receives
            for r in range(N):
                k = (r - 1 + first - s) % N  # what r's left neighbour sent
                held[r][k] = held[r][k] + sent[(r - 1) % N] if first == 0 else sent[(r - 1) % N]
            states.append([list(h) for h in held])
    return states


# ------------------------------------------------------------------------------------------------------ tests

def test_origins_decode_sums_and_copies():
    assert collectives.origins(collectives.origin_value(2, 3)) == [[2, 3]]
    both = collectives.origin_value(0, 1) + collectives.origin_value(3, 1)
    assert collectives.origins(both) == [[0, 1], [3, 1]]
    assert collectives.origins(0) == []
    with pytest.raises(ValueError):
        collectives.origins(-1)


def test_each_primitive_matches_the_single_process_reference(recorded):
    data, res = recorded
    assert res.ok and data["world_size"] == N
    assert mismatches(data) == []
    names = [p["name"] for p in data["primitives"]]
    assert names == [name for name, _, _ in collectives.PRIMITIVES]


def test_the_check_can_fail(recorded):
    """A record drawn from a wrong model is caught: all_to_all not transposed, a broadcast from the wrong root, and
    reduce's unspecified ranks not marked."""
    data, _ = recorded
    for name, corrupt in (
            ("all_to_all", lambda p: p.update(after=p["before"])),
            ("broadcast", lambda p: p.update(after=[p["before"][1]] * N)),
            ("reduce", lambda p: p.update(unspecified=[]))):
        wrong = {**data, "primitives": [dict(p) for p in data["primitives"]]}
        corrupt(next(p for p in wrong["primitives"] if p["name"] == name))
        assert any(line.startswith(name) for line in mismatches(wrong)), name


def test_reduce_shows_what_gloo_left_on_the_other_ranks(recorded):
    """The contract says nothing of the non-roots; the picture shows the run's real values there, marked."""
    data, _ = recorded
    p = next(p for p in data["primitives"] if p["name"] == "reduce")
    assert p["unspecified"] == [1, 2, 3] and all(p["notes"][r] for r in (1, 2, 3))
    assert all(len(p["after"][r]) == 1 for r in range(N))  # a value per rank, whatever it is


def test_ring_steps_follow_the_ring_and_end_in_all_reduce(recorded):
    data, _ = recorded
    ring = data["ring"]
    want = ring_reference()
    assert [(s["phase"], s["step"]) for s in ring["steps"]] == (
        [("reduce-scatter", i) for i in (1, 2, 3)] + [("all-gather", i) for i in (1, 2, 3)])
    for i, step in enumerate(ring["steps"]):
        for r, got in enumerate(step["ranks"]):
            assert got["to"] == (r + 1) % N and got["from"] == (r - 1) % N
            assert got["recv"] == step["ranks"][(r - 1) % N]["send"]  # what the left neighbour sent
            assert got["holds"] == [collectives.origins(v) for v in want[i][r]], (i, r)
    total = [[[r, c] for r in range(N)] for c in range(N)]  # every rank's chunk c, summed
    assert ring["result"] == ring["all_reduce"] == [total] * N
    assert ring["steps"][-1]["ranks"][0]["holds"] == total


def test_the_pictures_model_is_the_record(recorded):
    """What `draw_primitive` and `draw_ring` draw (their boxes) is exactly the record, box for box."""
    data, _ = recorded
    for p in data["primitives"]:
        bs = diagrams.boxes(p)
        assert len(bs) == sum(len(m) for side in ("before", "after") for m in p[side])
        for b in bs:
            assert [list(o) for o in b.origins] == p[b.side][b.rank][b.slot]
            assert b.unspecified == (b.side == "after" and b.rank in p["unspecified"])
    assert diagrams.label(((0, 0), (1, 0)), False) == "a+b" and diagrams.label((), True) == "empty"
    panels = diagrams.ring_boxes(data["ring"])
    states = [data["ring"]["start"]] + [[r["holds"] for r in s["ranks"]] for s in data["ring"]["steps"]]
    states.append(data["ring"]["all_reduce"])
    assert len(panels) == len(states) == 2 * (N - 1) + 2
    for bs, state in zip(panels, states):
        assert {(b.rank, b.slot): [list(o) for o in b.origins] for b in bs} == {
            (r, k): mix for r, mixes in enumerate(state) for k, mix in enumerate(mixes)}


def _non_blank(path: str) -> float:
    """The share of pixels that are not the background colour."""
    import matplotlib.image

    img = matplotlib.image.imread(path)[..., :3]
    return float(np.mean(np.any(np.abs(img - img[0, 0]) > 0.05, axis=-1)))


def test_a_picture_per_primitive_and_the_ring_with_its_timeline(recorded, tmp_path):
    data, res = recorded
    spec = importlib.util.spec_from_file_location("diagram_pages", os.path.join(ROOT, "docs", "diagram_pages.py"))
    pages = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pages)
    made = pages.draw_all(data, res, str(tmp_path))
    want = [name for name, _, _ in collectives.PRIMITIVES] + ["ring", "ring-timeline"]
    assert list(made["pictures"]) == want
    for name in want:
        path = tmp_path / made["pictures"][name]
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert _non_blank(str(path)) > 0.02, f"{name}.png is (nearly) blank"
        md = pages.markdown(name, {"rc": 0, **made})
        assert md.startswith("![") and md.endswith(f"(assets/diagrams/{name}.png)")
    with pytest.raises(RuntimeError):
        pages.markdown("ring", {"rc": 1, "stderr": "boom"})


def test_the_ring_timeline_holds_only_the_rings_calls(recorded):
    _, res = recorded
    ring = collectives.ring_calls(res)
    enters = [e for e in ring.events if e["ev"] == "enter"]
    assert {e["op"] for e in enters} == {"isend", "irecv", "wait", "all_reduce"}
    for r in range(N):  # per step one isend, one irecv and two waits; then the reference all_reduce
        mine = [e["op"] for e in enters if e["rank"] == r]
        assert mine.count("isend") == mine.count("irecv") == 2 * (N - 1) and mine[-1] == "all_reduce"
    exited = {(e["rank"], e["id"]) for e in ring.events if e["ev"] == "exit"}
    assert {(e["rank"], e["id"]) for e in enters} <= exited  # nothing drawn as stuck
