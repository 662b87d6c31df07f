"""Where `left_early` (sandbox/diagnose/connect.py) must step aside, on hand-made tracks: cases a reviewer who had not
written the rule built against it, each misnamed by its first version. The recorded runs where the race happened
are judged in test_diagnose_unit.py."""
from sandbox import policy
from sandbox.track import RankTrack

PEER = "RuntimeError: [/x/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1"


class Rank:
    """A rank's trace, written call by call."""

    def __init__(self, rank: int, world: int):
        self.t, self.rank, self.world = RankTrack(rank), rank, world
        self.id, self.now, self.seq, self.groups = 0, 100.0, 0, 0
        self._ev({"ev": "hello", "world_size": world, "local_rank": rank, "host": "vm", "pid": 1000 + rank})

    def _ev(self, e: dict) -> None:
        self.now += 0.01
        self.t.feed({"rank": self.rank, "t": self.now, **e})

    def call(self, op: str, err: str | None = None, stay: bool = False, **fields) -> "Rank":
        self.id += 1
        self._ev({"ev": "enter", "id": self.id, "op": op, "site": f"job.py:{self.id}", **fields})
        if not stay:
            self._ev({"ev": "exit", "id": self.id, "op": op, **({"error": err} if err else {})})
        return self

    def init(self, **kw) -> "Rank":
        return self.call("init_process_group", backend="gloo", endpoint="127.0.0.1:29500", world_size=self.world,
                         group=list(range(self.world)), gname="0", seq=0, **kw)

    def new_group(self, ranks, **kw) -> "Rank":
        self.groups += 1
        return self.call("new_group", ranks=ranks, index=self.groups, **kw)

    def all_reduce(self, **kw) -> "Rank":
        self.seq += 1
        return self.call("all_reduce", group=list(range(self.world)), gname="0", seq=self.seq, shapes=[[4]],
                         dtypes=["float32"], devices=["cpu"], sig="all_reduce|None|[[4]]|['float32']", **kw)

    def ok(self) -> "Rank":
        self._ev({"ev": "end", "outcome": "ok", "exit_code": 0})
        return self

    def failed(self) -> "Rank":
        self._ev({"ev": "end", "outcome": "error", "exit_code": 1,
                  "error": {"type": "RuntimeError", "message": PEER, "site": "job.py:9", "traceback": ""}})
        return self


def _judge(*ranks):
    j = policy.judge({r.rank: r.t for r in ranks})
    return j.diagnosis.kind, j.diagnosis.culprit_ranks, j.diagnosis.summary


def test_a_rank_that_skipped_a_collective_is_missing_even_when_another_was_cut_off_in_init():
    """Rank 2 skips the all_reduce and leaves; rank 3, still connecting, fails in init; ranks 0 and 1 fail in the
    all_reduce rank 2 never made. The cause is rank 2's missing call, not the connect race."""
    kind, culprits, said = _judge(Rank(0, 4).init().all_reduce(err=PEER).failed(),
                                  Rank(1, 4).init().all_reduce(err=PEER).failed(),
                                  Rank(2, 4).init().call("destroy_process_group").ok(),
                                  Rank(3, 4).init(err=PEER).failed())
    assert (kind, culprits) == ("missing_ranks", [2]), said


def test_a_rank_that_did_not_init_again_is_missing_from_the_second_init():
    """Every rank makes init, all_reduce, destroy; rank 0 then leaves where ranks 1 and 2 init again: its first init
    is not the one they wait in."""
    r1, r2 = (Rank(r, 3).init().all_reduce().call("destroy_process_group").init(stay=True) for r in (1, 2))
    kind, culprits, said = _judge(Rank(0, 3).init().all_reduce().call("destroy_process_group").ok(), r1, r2)
    assert (kind, culprits) == ("missing_ranks", [0]), said


def test_ranks_cut_off_in_a_new_group_keep_the_group_they_were_making():
    """Rank 0 creates [0, 1, 2, 3] where the others create [1, 2, 3]; ranks 1 and 2 fail in theirs as rank 3, through
    it, leaves. Rank 0 is the odd one."""
    kind, culprits, said = _judge(Rank(0, 4).init().new_group([0, 1, 2, 3], stay=True),
                                  Rank(1, 4).init().new_group([1, 2, 3], err=PEER).failed(),
                                  Rank(2, 4).init().new_group([1, 2, 3], err=PEER).failed(),
                                  Rank(3, 4).init().new_group([1, 2, 3]).ok())
    assert (kind, culprits) == ("group_mismatch", [0]), said


def test_ranks_that_finished_while_another_connected_are_named():
    """The race itself, in its smallest form: rank 1 fails in init as rank 0, through it, has finished."""
    kind, culprits, said = _judge(Rank(0, 2).init().call("destroy_process_group").ok(),
                                  Rank(1, 2).init(err=PEER).failed())
    assert (kind, culprits) == ("left_early", [0]), said
    assert "Rank 1 failed in init_process_group" in said and "closed its side" in said, said


def test_a_rank_cut_off_in_a_new_group_never_made_the_next_one_and_that_is_no_group_mismatch():
    """The class of tests/data/cut_off/f4 (recorded: tests/traces/left_connecting_new_group_*): rank 3, the driver,
    makes both groups and leaves while rank 0 is still connecting in the first ([0, 3]); rank 0 fails there, and
    ranks 1 and 2 wait for it in the second. Rank 0 never made the second group because it was cut off, not because
    it created groups otherwise: rank 3 left early."""
    kind, culprits, said = _judge(Rank(0, 4).init().new_group([0, 3], err=PEER).failed(),
                                  Rank(1, 4).init().new_group([0, 3]).new_group([0, 1, 2], stay=True),
                                  Rank(2, 4).init().new_group([0, 3]).new_group([0, 1, 2], stay=True),
                                  Rank(3, 4).init().new_group([0, 3]).new_group([0, 1, 2])
                                  .call("destroy_process_group").ok())
    assert (kind, culprits) == ("left_early", [3]), said


def test_groups_made_otherwise_before_a_rank_was_cut_off_are_still_a_group_mismatch():
    """Rank 0 creates the workers' group first, where the others create the control group first, and fails in it
    as rank 3 leaves: its groups up to there still count, and they differ at the first."""
    kind, culprits, said = _judge(Rank(0, 4).init().new_group([0, 1, 2], err=PEER).failed(),
                                  Rank(1, 4).init().new_group([0, 3]).new_group([0, 1, 2], stay=True),
                                  Rank(2, 4).init().new_group([0, 3]).new_group([0, 1, 2], stay=True),
                                  Rank(3, 4).init().new_group([0, 3]).new_group([0, 1, 2])
                                  .call("destroy_process_group").ok())
    assert (kind, culprits) == ("group_mismatch", [0]), said
