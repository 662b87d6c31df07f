"""The hang rule on views that were never true at one moment, from hand-built tracks and dumps (no ranks).

Found under load (issue 28, part 5): benchmarks/core.py part 4's correct loop of all_reduces on 2 ranks, and a correct
DDP job whose rank 0 paused for a checkpoint, were stopped as hangs ("rank 0 waits in all_reduce #2800 ... rank 1 is
in all_reduce #4800"). The watcher had judged (1) calls that Flight Recorder dumps showed running when they were
taken, as if still running seconds later, when the merge was done; (2) the oldest entry of one rank's dump as a call
its peer never made, when it had only fallen out of the peer's buffer (2000 entries), which the peer had filled up
to one call later; and it could judge (3) traces read while a rank moved."""
from __future__ import annotations

import pickle

from sandbox import flight, flight_view, policy
from sandbox.events import RankTrack
from sandbox.flight import SYNTHETIC_ID

S = policy.Settings(hang_after=1.0, settle=0.1, timeout=300.0)
G = {"gname": "0", "group": [0, 1]}
AR = {"op": "all_reduce", **G, "shapes": [[16]], "dtypes": ["float32"], "redop": "SUM"}


def _live(rank: int) -> RankTrack:
    t = RankTrack(rank)
    t.feed({"ev": "hello", "rank": rank, "world_size": 2, "pid": 100 + rank, "flight": True, "t": 0.0})
    t.pid = 100 + rank
    return t


def _decide(tracks, now, quiet_s):
    return policy.decide(tracks, now, elapsed=30.0, quiet_s=quiet_s, failed_since=None, settings=S)


def test_a_call_a_dump_showed_running_counts_as_blocked_only_up_to_when_the_dump_was_asked_for():
    """The view of the false hang, as the watcher built it: the dumps were asked for at 93.552; rank 0's showed
    all_reduce #2800 (the oldest entry of its buffer, not in rank 1's) and rank 1's showed #4800, which began
    just before its dump was taken; merging them took 1.3 s, and at 94.886 both looked blocked for 1.3 s. No rank
    was seen in its call for a second: the rank went on (both finished their loop)."""
    asked, now = 93.552, 94.886
    tracks = {r: _live(r) for r in (0, 1)}
    for r, seq, t in ((0, 2800, 92.225), (1, 4800, 93.551)):
        tracks[r].feed({"ev": "enter", "rank": r, "id": SYNTHETIC_ID + seq - 1, "t": t, "seq": seq, "site": None,
                        "lens": "flight", **AR})
        tracks[r].seen_t = asked
    assert policy.blocked_for(tracks, now) < S.hang_after
    assert _decide(tracks, now, quiet_s=5.0) is None
    # the same calls, seen in them a second later (fresh dumps), are a hang
    for t in tracks.values():
        t.seen_t = asked + 1.0
    d = _decide(tracks, asked + 1.2, quiet_s=5.0)
    assert d is not None and d.stop == policy.HANG and abs(d.blocked_s - 1.001) < 1e-6
    # offline (no seen_t) the clock of the judge is all there is, as before
    for t in tracks.values():
        t.seen_t = None
    assert _decide(tracks, now, quiet_s=5.0).stop == policy.HANG


def test_traces_read_while_a_rank_moved_are_not_a_hang_until_read_again_unchanged():
    """Rank 1's file read after rank 0's, in one look: rank 0 is seen in all_reduce #5 (waiting for rank 1 since
    97.0), rank 1 already in #6 (since 98.5), which it could not have entered unless rank 0 had left #5. A look that
    found a trace grown is not ruled on; a look that finds nothing new since (quiet for `settle`) is."""
    tracks = {0: _live(0), 1: _live(1)}
    tracks[0].feed({"ev": "enter", "rank": 0, "id": 7, "t": 97.0, "seq": 5, "site": "job.py:9", **AR})
    tracks[1].feed({"ev": "enter", "rank": 1, "id": 8, "t": 98.5, "seq": 6, "site": "job.py:9", **AR})
    for t in tracks.values():
        t.seen_t = 100.0
    assert _decide(tracks, 100.0, quiet_s=0.0) is None
    d = _decide(tracks, 100.2, quiet_s=0.2)
    assert d is not None and d.stop == policy.HANG


def _entry(seq: int, t: float, op: str = "all_reduce", state: str = "completed") -> dict:
    """One collective of the default group as torch's Flight Recorder dumps it (format 2.x, no frames)."""
    return {"record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": f"gloo:{op}", "time_created_ns": int(t * 1e9),
            "input_sizes": [[5]], "input_dtypes": ["Float"], "output_sizes": [[5]], "output_dtypes": ["Float"],
            "state": state, "is_p2p": False}


def _dump(entries: list[dict], completed: int) -> dict:
    return pickle.loads(pickle.dumps({"version": "2.10", "pg_status": {"0": {
        "last_enqueued_collective": entries[-1]["collective_seq_id"], "last_started_collective": -1,
        "last_completed_collective": completed}}, "entries": entries}))


def test_a_call_that_fell_out_of_a_peers_recorder_was_reached_by_that_peer():
    """A correct DDP job past its recorders' size (here 3 entries for 2000): rank 0 made gradient all_reduces #1-5
    (in C++, untraced) and saves a checkpoint; rank 1 made the same and waits in dist.barrier() (#6) for it. Rank 1's
    buffer holds #4-6, rank 0's #3-5: #3 fell out of rank 1's buffer, and rank 1 reached it. Judged as a call
    rank 1 never made, rank 0 sat in #3 and the run was a hang ("rank 0 waits in all_reduce #306 ... rank 1 is in
    barrier #2306")."""
    dumps = {0: _dump([_entry(s, 10.0 + s) for s in (3, 4, 5)], completed=5),
             1: _dump([_entry(s, 10.0 + s) for s in (4, 5)] + [_entry(6, 20.0, "barrier", "scheduled")], completed=5)}
    tracks = {0: _live(0), 1: _live(1)}
    tracks[1].feed({"ev": "enter", "rank": 1, "id": 2, "t": 19.9999, "seq": 1, "cseq": 5, "op": "barrier",
                    "site": "train.py:40", **G})
    assert flight_view.reached_by({r: flight.calls(d, r) for r, d in dumps.items()})[("0", 3)] == {0, 1}
    view = flight_view.merge(tracks, dumps)
    assert view[0].pending is None  # saving its checkpoint, in no call
    assert view[1].pending["op"] == "barrier" and view[1].pending["seq"] == 6
    for t in view.values():
        t.seen_t = 23.0
    assert _decide(view, 23.0, quiet_s=3.0) is None  # a straggler: not a hang
    # a call the peer's buffer would hold if it had made it (later than its oldest) is still one it never made
    dumps[0] = _dump([_entry(s, 10.0 + s) for s in (4, 5)] + [_entry(6, 20.0, "all_reduce", "scheduled")], completed=5)
    view = flight_view.merge({0: _live(0), 1: tracks[1]}, dumps)
    assert view[0].pending["op"] == "all_reduce" and view[0].pending["lens"] == "flight"


def test_the_watch_leaves_out_dumps_a_rank_has_written_trace_lines_since(tmp_path):
    """The watcher's side (`sandbox._run.watch`, the lifecycle both launchers share): dumps join the view only while
    no live rank has written a trace line since they were asked for, and a call only a dump shows is seen only as
    of that ask. (Part 4's loop: dumps asked for while the loop ran untraced were merged into the view of the traced
    segment after it, where the calls they showed running had long returned and the tracer's calls took no number
    from them.)"""
    from sandbox._run.lifecycle import Lifecycle
    from sandbox._run.zygote import ZygoteProcs
    from sandbox.topology import Topology

    class Ranks(ZygoteProcs):  # two ranks the zygote's backend knows, no zygote, nothing more to read
        def poll(self, wait):
            return False

    life = Lifecycle(topology=Topology(nnodes=1, per_node=2), hang_after=1.0, timeout=300.0, trace_dir=str(tmp_path))
    life.procs = Ranks(life, {}, warm=False, env_extra={})
    tracks = life.procs.ranks
    for r in (0, 1):
        tracks[r] = _live(r)
        tracks[r].feed({"ev": "enter", "rank": r, "id": 2, "t": 1.0, "op": "barrier", "seq": 1, "site": "job.py:3",
                        **G})
        tracks[r].feed({"ev": "exit", "rank": r, "id": 2, "op": "barrier", "t": 1.1})
        tracks[r].seen_t = 20.0
    life.procs.read.update({0: 3, 1: 3})
    for r, last in ((0, "scheduled"), (1, "completed")):  # rank 0 was inside #3 when its dump was taken
        entries = [_entry(1, 11.0), _entry(2, 12.0), _entry(3, 13.0, state=last)]
        (tmp_path / f"fr-{r}.pkl").write_bytes(pickle.dumps(_dump(entries, completed=2 if r == 0 else 3)))
        life.dump_asked[r] = (13.5, 3)  # asked for at 13.5, when each rank's trace had 3 lines (what _ask_flight notes)
    view, merged = life._view()
    assert merged and view[0].pending["seq"] == 3 and view[0].seen_t == 13.5
    assert view[1].seen_t == 20.0 and view[1].pending is None
    life.procs.read[1] = 5  # rank 1 wrote two lines since: the dumps are behind its trace
    view, merged = life._view()
    assert not merged and view is tracks
