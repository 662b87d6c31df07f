"""How the sandbox's launcher ends a run's ranks (`sandbox._run.stop`), with the signals recorded instead of sent: no
rank is started here."""
import os
import signal
import threading

from sandbox._run.stop import Stopping
from sandbox._run.watch import Watching
from sandbox.events import RankTrack


def test_a_rank_is_asked_for_its_stack_only_once_its_recorder_dump_is_written(tmp_path, monkeypatch):
    """faulthandler's dump of every thread (SIGUSR1) reads the other threads' Python frames without the GIL, and a
    rank's recorder thread runs Python while it writes its dump (SIGUSR2): asked both at once, as the stop step did,
    a stopped rank now and then died of SIGSEGV and its output showed "Fatal Python error: Segmentation fault" (one
    in about 500 pairs of signals on a rank sleeping in its own code; none in 4000 pairs with the stack asked after
    the dump). Here each rank's dump lands 50 ms after it is asked for."""
    sent = []

    class Run(Watching, Stopping):
        def __init__(self):
            self.dir, self.held, self.stopped_for, self.stack_from = str(tmp_path), [], None, {}
            self.tracks, self.raw = {}, {}
            for r in (0, 1):
                t = self.tracks[r] = RankTrack(r)
                t.feed({"ev": "hello", "rank": r, "pid": 100 + r, "flight": True, "t": 0.0})
                t.pid, self.raw[r] = 100 + r, []

        def _pump(self, wait, parse=True):
            return False

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

    monkeypatch.setattr(os, "kill", kill)
    Run()._stop("failure")
    for rank in (0, 1):
        mine = [(s, w) for r, s, w in sent if r == rank]
        assert [s for s, _ in mine] == ["SIGUSR2", "SIGUSR1", "SIGSTOP", "SIGKILL"], sent
        assert dict(mine)["SIGUSR1"], f"rank {rank} was asked for its stack while its recorder dumped: {sent}"
