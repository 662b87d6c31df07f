"""How the run lifecycle ends a run's ranks (`sandbox._run.stop`), with the signals recorded instead of sent: no
rank is started here."""
import os
import signal
import threading

from sandbox._run.lifecycle import Lifecycle
from sandbox._run.zygote import ZygoteProcs
from sandbox.topology import Topology


class _Ranks(ZygoteProcs):
    """The zygote's backend with two ranks it knows (pids 100, 101, their recorders armed) and no zygote."""

    def __init__(self, life):
        super().__init__(life, {}, warm=False, env_extra={})
        for r, t in self.ranks.items():
            t.feed({"ev": "hello", "rank": r, "pid": 100 + r, "flight": True, "t": 0.0})
            t.pid = 100 + r

    def poll(self, wait: float) -> bool:
        return False

    def gone(self, rank: int) -> bool:
        return False  # pretend processes: live until the signals recorded say otherwise


def test_a_rank_is_asked_for_its_stack_only_once_its_recorder_dump_is_written(tmp_path, monkeypatch):
    """faulthandler's dump of every thread (SIGUSR1) reads the other threads' Python frames without the GIL, and a
    rank's recorder thread runs Python while it writes its dump (SIGUSR2): asked both at once, as the stop step did,
    a stopped rank now and then died of SIGSEGV and its output showed "Fatal Python error: Segmentation fault" (one
    in about 500 pairs of signals on a rank sleeping in its own code; none in 4000 pairs with the stack asked after
    the dump). Here each rank's dump lands 50 ms after it is asked for. The lifecycle is both launchers'."""
    sent = []

    def dump(rank):
        (tmp_path / f"fr-{rank}.pkl").write_bytes(b"dump")

    def kill(pid, sig):
        rank = pid - 100
        written = (tmp_path / f"fr-{rank}.pkl").exists()
        sent.append((rank, signal.Signals(sig).name, written))
        if sig == signal.SIGUSR2:
            threading.Timer(0.05, dump, (rank,)).start()
        elif sig == signal.SIGUSR1:
            (tmp_path / f"stack-{rank}.txt").write_text("Thread 0x1 (most recent call first):\n")

    life = Lifecycle(topology=Topology(nnodes=1, per_node=2), hang_after=1.0, timeout=60.0, trace_dir=str(tmp_path))
    life.procs = _Ranks(life)
    monkeypatch.setattr(os, "kill", kill)
    life._stop("failure")
    for rank in (0, 1):
        mine = [(s, w) for r, s, w in sent if r == rank]
        assert [s for s, _ in mine] == ["SIGUSR2", "SIGUSR1", "SIGSTOP", "SIGKILL"], sent
        assert dict(mine)["SIGUSR1"], f"rank {rank} was asked for its stack while its recorder dumped: {sent}"
