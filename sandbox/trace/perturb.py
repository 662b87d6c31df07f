"""A rank's own part of an explored schedule (`sandbox.schedules`): it sleeps where the schedule says, before its
program starts and before chosen traced calls. Asleep it is in its own code, not in a call: the watchdog sees a
rank that has not arrived yet, as on a cluster where it was slow, never one that hangs.
"""
from __future__ import annotations

import itertools
import os
import time

from sandbox import schedules
from sandbox.trace import record


def install(rank: int) -> None:
    """Apply the schedule in this rank's environment, if any: the start delay now; the hold and the slow-down from
    the rank's next traced call on (`record.before_call`). The variable is removed, so that a process the program
    starts is not perturbed twice."""
    s = schedules.parsed(os.environ.pop(schedules.ENV, None))
    if s is None:
        return
    hold, slow = s.get("hold"), s.get("slow")
    hold = hold if hold and hold[0] == rank else None
    each = slow[1] if slow and slow[0] == rank else 0.0
    if hold or each:
        counted = itertools.count(1)

        def before() -> None:
            k = next(counted)
            pause = each + (hold[2] if hold and k == hold[1] else 0.0)
            if pause:
                time.sleep(pause)

        record.before_call = before
    start = s.get("start") or ()
    if rank < len(start) and start[rank]:
        time.sleep(start[rank])
