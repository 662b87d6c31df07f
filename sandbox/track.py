"""One rank's state, built from its trace events (the format is `sandbox.events`'): what it is inside now, what it
posted, which collectives it got through, its hello, end and notes. What the hang rule, the diagnosis and the
contracts read. Torch-free.
"""
from __future__ import annotations

from sandbox.calls import RECVS, is_collective, p2p_ops

P2P_WINDOW = 256  # a rank remembers the order of about its last P2P_WINDOW point-to-point ops
BUCKET_WINDOW = 4096  # a rank remembers the collectives of its last BUCKET_WINDOW sequence numbers per group
MAX_NOTES = 10_000  # per rank: a lab's rule reads a few; a note in a hot loop must not fill the parent's memory
MAX_EVENTS = 200_000  # per rank: a long job keeps its most recent calls, not all of them


class RankTrack:
    """One rank's state, built from its trace events by `feed` (the only writer of the trace-derived fields).

    The process facts (`pid`, `exit_code`, `exit_t`, `ended_by_sandbox`, `seen_t`) are set by the launcher of a live
    run and stay None/False offline; `stack` is read from the stack file. Outcomes are not stored here: the judge
    (`sandbox.policy.judge`) derives them.
    """

    def __init__(self, rank: int):
        self.rank = rank
        self.events: list[dict] = []
        self.open: dict[int, dict] = {}        # call id -> enter event, for calls that have not finished
        self.inflight: set[int] = set()        # of those, calls that returned to Python but run on the GPU
        self.posted: dict = {}                 # async ops started but not yet waited on
        self.hello: dict | None = None
        self.end: dict | None = None
        self.inits: list[dict] = []
        self.new_groups: list[dict] = []
        self.by_bucket: dict[tuple, dict] = {}  # (gname, seq) -> enter event of that collective
        self.passed: dict[tuple, bool] = {}      # (gname, seq) -> that collective returned without an error
        self.failed_call: dict | None = None     # the distributed call that raised, if one did
        self.failed_with: str | None = None      # what it raised (the exit event's error), even if the rank was
                                                 # ended before its own error record was written
        self.pid: int | None = None
        self.exit_code: int | None = None
        self.exit_t: float | None = None
        self.ended_by_sandbox = False
        # when what this track says was last known to be true (time.time()): its trace read to its end, or, for a
        # call a Flight Recorder dump added, when that dump was asked for. The rank may have moved on since: the hang
        # rule counts it blocked only up to then (None: offline, the track is all there is)
        self.seen_t: float | None = None
        self.stack: str | None = None
        # for the contract checks on a run that is over (sandbox.contracts)
        self.p2p_done: dict[tuple, int] = {}     # (direction, peer, tag) -> point-to-point calls that returned
        self.p2p_site: dict[tuple, str] = {}     # (direction, peer) -> the first such call's site
        self.destroyed = False                   # destroy_process_group returned after the last init
        self.object_devices: list[dict] = []     # object collectives whose objects held tensors: call, sent, got
        self.ddp: list[dict] = []                # the `ddp` events: DistributedDataParallel constructions
        self.notes: list[dict] = []              # the `note` events' fields: facts the rank's code recorded
        self.written: list[dict] = []            # `written` events: isends whose tensor was written before the wait
        # recent point-to-point ops in the order this rank posted them: (direction, peer, tag, number, entered,
        # blocking, site), `number` counting the ops of that (direction, peer, tag) from the start: the n-th send
        # from a to b with a tag is matched by b's n-th recv from a with that tag
        self.p2p_posted: list[tuple] = []
        # receives without src that completed, each {"op", "site", "from"}: whom each took its message from
        self.any_source: list[dict] = []
        self._waited: dict[int, dict] = {}  # wait id -> the irecv from any rank it waits on
        self._p2p_count: dict[tuple, int] = {}

    def feed(self, ev: dict) -> None:
        self.events.append(ev)
        if len(self.events) > MAX_EVENTS:
            del self.events[:MAX_EVENTS // 2]
        kind = ev.get("ev")
        if kind == "enter":
            self.open[ev["id"]] = ev
            op = ev["op"]
            if op == "init_process_group":
                self.inits.append(ev)
            elif op == "new_group":
                self.new_groups.append(ev)
            elif is_collective(ev) and op != "wait" and "seq" in ev:
                key = (ev.get("gname"), ev["seq"])
                self.by_bucket[key] = ev
                if isinstance(ev["seq"], int):  # only recent calls matter
                    old = (ev.get("gname"), ev["seq"] - BUCKET_WINDOW)
                    self.by_bucket.pop(old, None)
                    self.passed.pop(old, None)
            elif op == "wait":
                of = self.posted.pop(ev.get("of_id"), None)
                self.posted.pop((ev.get("of_id"), ev.get("of_idx")), None)
                if of is not None and of["op"] in RECVS and of.get("peer") is None:
                    self._waited[ev["id"]] = of  # an irecv from any rank: its exit says whom it got
            for direction, peer, tag in p2p_ops(ev):
                if peer is not None:
                    self._note_posted(direction, peer, tag, ev)
        elif kind == "exit" and ev.get("inflight"):
            if ev.get("id") in self.open:  # returned to Python, still running on the GPU: still pending
                self.inflight.add(ev["id"])
        elif kind == "done":
            self._returned(ev, self.open.pop(ev.get("id"), None))
        elif kind == "exit":
            start = self.open.pop(ev.get("id"), None)
            self._returned(ev, start)
            if start is not None and ev.get("got_devices") and len(self.object_devices) < 1000:
                self.object_devices.append({"call": start, "sent": ev.get("sent_devices") or [],
                                            "got": ev["got_devices"]})
            if start is not None:
                if ev.get("error"):
                    self.failed_call, self.failed_with = start, ev["error"]
                elif start.get("async") and start["op"] != "wait":
                    if start["op"] == "batch_isend_irecv":
                        for i, p in enumerate(start.get("p2p", [])):
                            self.posted[(start["id"], i)] = {**start, "op": p["op"], "peer": p["peer"]}
                    else:
                        self.posted[start["id"]] = start
        elif kind == "hello":
            self.hello = ev
        elif kind == "written" and len(self.written) < MAX_NOTES:
            self.written.append(ev)
        elif kind == "note" and len(self.notes) < MAX_NOTES:
            self.notes.append(ev.get("fields") or {})
        elif kind == "ddp" and len(self.ddp) < 100:
            self.ddp.append(ev)
        elif kind == "end":
            self.end = ev

    def _note_posted(self, direction: str, peer: int, tag: int, ev: dict) -> None:
        n = self._p2p_count[(direction, peer, tag)] = self._p2p_count.get((direction, peer, tag), 0) + 1
        if len(self.p2p_posted) >= 2 * P2P_WINDOW:
            del self.p2p_posted[:P2P_WINDOW]
        blocking = not ev.get("async") and ev["op"] != "batch_isend_irecv"
        self.p2p_posted.append((direction, peer, tag, n, ev.get("t", 0), blocking, ev.get("site")))

    def _returned(self, ev: dict, start: dict | None) -> None:
        if start is None:
            return
        self.inflight.discard(start["id"])
        if not ev.get("error"):
            op = start["op"]
            if op in ("init_process_group", "destroy_process_group"):
                self.destroyed = op == "destroy_process_group"
            for direction, peer, tag in p2p_ops(start):
                self.p2p_done[(direction, peer, tag)] = self.p2p_done.get((direction, peer, tag), 0) + 1
                self.p2p_site.setdefault((direction, peer), start.get("site") or "?")
            recv = self._waited.pop(start["id"], None) or (start if op in RECVS else None)
            if recv is not None and isinstance(ev.get("from"), int):  # a receive from any rank: now it has a peer
                key = ("recv", ev["from"], recv.get("tag", 0))
                self.p2p_done[key] = self.p2p_done.get(key, 0) + 1
                self.p2p_site.setdefault(("recv", ev["from"]), recv.get("site") or "?")
                if len(self.any_source) < MAX_NOTES:
                    self.any_source.append({"op": recv["op"], "site": recv.get("site") or "?", "from": ev["from"],
                                            "tag": recv.get("tag", 0)})
        if is_collective(start) and start["op"] != "wait" and "seq" in start:
            self.passed[(start.get("gname"), start["seq"])] = not ev.get("error")

    @property
    def pending(self) -> dict | None:
        """The distributed call this rank is inside now (the innermost one), or None."""
        if not self.open:
            return None
        return self.open[max(self.open)]

    @property
    def unwaited_collective(self) -> dict | None:
        """The earliest collective this rank started with async_op=True and had not waited on yet (gloo runs it in
        a thread of its own meanwhile), or None."""
        calls = [c for c in self.posted.values() if is_collective(c)]
        return min(calls, key=lambda c: c["id"]) if calls else None

    @property
    def error(self) -> dict | None:
        """The error the rank's own code raised (from its `end` event), or None."""
        if self.end is not None and self.end.get("outcome") == "error":
            return self.end.get("error")
        return None

    @property
    def finished(self) -> bool:
        """Done with its own code. A rank the sandbox ended is judged as it was when it was ended: not finished."""
        if self.ended_by_sandbox:
            return False
        if self.pid is not None:  # a live run: the process may still run atexit handlers after its "end"
            return self.exit_code is not None
        return self.exit_code is not None or self.end is not None
