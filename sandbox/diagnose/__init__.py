"""The rules: when can no rank move any more, and what is the cause, from per-rank tracks alone.

Hang detection is a rule: a run is deadlocked when no rank that is still alive can make progress, that is every
one of them is blocked in a distributed call that its peers cannot complete (they are elsewhere, gone, or waiting
in an incompatible call). `progress_possible` is that rule. Some deadlocks are certain the moment the last rank
blocks (`provable_deadlock`: every member of a group inside the same call #k with calls that cannot pair; a cycle
of blocking point-to-point calls); the others need the watchdog's grace period. The `diagnose_*` functions name the
cause; `sandbox.policy` decides which one applies. The offline command is `python -m sandbox.diagnose DIR`.

What must match across ranks at one call is `sandbox.calls`' alone to say. The rules live in:

- `progress`: the hang rule (can a call complete, is the deadlock provable);
- `mismatch`: ranks that disagree on the rendezvous, the groups they create, or the call they make;
- `hang`: naming a hang, a timeout, an interrupted run (point-to-point cycles, missing ranks);
- `failure`: naming a crash or an error;
- `hosts`: what only happens with ranks on several hosts (a loopback rendezvous, a rank claimed twice, gloo on a
  loopback address), read from the host each rank said hello from.
"""
from sandbox.diagnose.failure import diagnose_failure
from sandbox.diagnose.hang import (P2P_ADVICE, blocked_call, diagnose_hang, diagnose_interrupted, diagnose_timeout,
                                   lost_peer)
from sandbox.diagnose.mismatch import rank_branch_of
from sandbox.diagnose.progress import can_complete, progress_possible, provable_deadlock

__all__ = ["P2P_ADVICE", "blocked_call", "can_complete", "diagnose_failure", "diagnose_hang", "diagnose_interrupted",
           "diagnose_timeout", "lost_peer", "progress_possible", "provable_deadlock", "rank_branch_of"]
