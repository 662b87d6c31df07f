"""A rank's own part of an explored schedule (`sandbox.schedules`): it sleeps where the schedule says, before its
program starts and before chosen traced calls, and gives a receive from any rank the sender the schedule names.
Asleep it is in its own code, not in a call: the watchdog sees a rank that has not arrived yet, as on a cluster
where it was slow, never one that hangs.
"""
from __future__ import annotations

import itertools
import os
import time

from sandbox import schedules
from sandbox.calls import RECVS  # what a schedule's `match` gives a sender: a receive made without src or group_src
from sandbox.trace import record


def install(rank: int) -> None:
    """Apply the schedule in this rank's environment, if any: the start delay now; the hold, the slow-down and the
    matched receive from the rank's next traced call on (`record.before_call`). The variable is removed, so that a
    process the program starts is not perturbed twice."""
    s = schedules.parsed(os.environ.pop(schedules.ENV, None))
    if s is None:
        return
    hold, slow, match = s.get("hold"), s.get("slow"), s.get("match")
    hold = hold if hold and hold[0] == rank else None
    match = match if match and match[0] == rank else None
    each = slow[1] if slow and slow[0] == rank else 0.0
    if hold or each or match:
        counted = itertools.count(1)

        def before(spec, args, kwargs):
            k = next(counted)
            pause = each + (hold[2] if hold and k == hold[1] else 0.0)
            if pause:
                time.sleep(pause)
            if match and k == match[1] and spec.name in RECVS and spec.arg(args, kwargs, "src") is None \
                    and spec.arg(args, kwargs, "group_src") is None:
                return spec.given(args, kwargs, "src", match[2])
            return args, kwargs

        record.before_call = before
    start = s.get("start") or ()
    if rank < len(start) and start[rank]:
        time.sleep(start[rank])
