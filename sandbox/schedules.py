"""The schedules a real cluster could give a run, as perturbations the ranks apply to themselves: of timing, and of
which sender a receive from any rank matches.

A program that passed once proves little: on a cluster its ranks start at different times, one is held up by a page
fault or a slow disk before some call, one runs slower throughout; which of two senders a recv without a source
matches, whether an isend's buffer is read before the program writes it again, whether a store key is set before it
is read: all follow. `--explore K` (`sandbox.explore`) runs a program K times, each under one `Schedule`, drawn from a
seed and the calls the program made in an unperturbed first run (so that a hold lands on a call it makes: each call
in turn first, point-to-point ones before the rest; and a receive from any rank is given each rank that sent to
it), and `--replay SEED` gives the same schedule again.

What a schedule holds, every part applied inside the ranks (`sandbox.trace.perturb`):
- `start`: each rank's delay, in seconds, before its program starts;
- `hold`: (rank, k, seconds): that rank sleeps before its k-th traced call (calls counted from 1, as the trace
  numbers them; waits on a Work not counted);
- `slow`: (rank, seconds): that rank sleeps before each of its traced calls;
- `match`: (rank, k, src): that rank's k-th traced call, a receive without `src` (`recv`, `irecv`), takes the
  message of rank `src`, one of the ranks that sent to it in the first run: which sender a receive from any rank
  matches is the order messages arrive in, which timing alone may never turn over (a sender that is always a
  second behind);
- `hash_seeds`: the string-hash seed of the even ranks and of the odd ones (the run starts zygotes of its own under
  them), for a program whose calls follow a set's order: separate processes each iterate a set in their own order.
A rank asleep is in its own code, not in a call, so the watchdog never takes it for hung. Torch-free.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from sandbox.defaults import HASH_SEED_LIST_ENV

ENV = "SANDBOX_SCHEDULE"  # the schedule a rank applies, as JSON (set by the launcher for one run)
PASSES_S = (0.4, 0.8)      # the holds of the first seeds, one pass over the calls each (asleep is not hung)
HOLDS_S = (0.05, 0.2, 0.5)  # how long a held rank sleeps in a later seed's schedule, at random
SLOW_S = (0.005, 0.02)      # a slow rank's sleep before each call
START_S = 0.3               # a rank's start delay is drawn from [0, START_S]


@dataclass(frozen=True)
class Schedule:
    seed: int
    start: tuple[float, ...]
    hold: tuple[int, int, float] | None = None
    slow: tuple[int, float] | None = None
    hash_seeds: tuple[int, ...] | None = None  # each zygote's string-hash seed (rank r: seed r % len), if chosen
    match: tuple[int, int, int] | None = None
    about: str | None = field(default=None, compare=False)  # the call held or matched, in words ('recv at x.py:9')

    def env(self) -> dict[str, str]:
        env = {ENV: json.dumps({"seed": self.seed, "start": list(self.start), "hold": self.hold, "slow": self.slow,
                                "match": self.match})}
        if self.hash_seeds:
            env[HASH_SEED_LIST_ENV] = ",".join(str(x) for x in self.hash_seeds)
        return env

    def words(self) -> str:
        """'rank 2 held 0.5 s before its call 17; rank 1 slow (20 ms before each call); starts 0, 120, 0, 40 ms';
        'string-hash seeds 11 (even ranks) and 22 (odd ranks)'."""
        parts = []
        if self.hash_seeds:
            parts.append(f"string-hash seeds {self.hash_seeds[0]} (even ranks) and {self.hash_seeds[1]} (odd ranks)"
                         if len(self.hash_seeds) == 2 else f"string-hash seeds {self.hash_seeds}")
        about = f" ({self.about})" if self.about else ""
        if self.match:
            r, k, src = self.match
            parts.append(f"rank {r}'s call {k}{about}, a receive from any rank, matched to rank {src}'s send")
        if self.hold:
            r, k, s = self.hold
            parts.append(f"rank {r} held {s:g} s before its call {k}{'' if self.match else about}")
        if self.slow:
            parts.append(f"rank {self.slow[0]} slow ({self.slow[1] * 1000:g} ms before each call)")
        if any(self.start):
            parts.append("starts " + ", ".join(f"{s * 1000:.0f}" for s in self.start) + " ms")
        return "; ".join(parts) or "no perturbation"


def _weight(op: str) -> int:
    """Which calls a hold tries first: point-to-point ones (what a recv matches, when an isend's buffer is read),
    then collectives and the rest, then the group's creation and end (a hold there is a late start)."""
    from sandbox.calls import OPS

    kind = OPS[op].kind if op in OPS else "local"
    return {"p2p": 0, "coll": 1, "new_group": 1, "local": 2}.get(kind, 3)


def holds(made: dict[int, list[str]]) -> list[tuple[int, int]]:
    """Every (rank, k) a hold can land on, in the order they are tried: by `_weight` of the call, then by k, then
    by rank."""
    return sorted(((r, k) for r, ops in made.items() for k in range(1, len(ops) + 1)),
                  key=lambda rk: (_weight(made[rk[0]][rk[1] - 1]), rk[1], rk[0]))


HASH_TRIES = 4  # for a program whose calls follow a set's order: the first seeds draw string-hash seeds only


def drawn(seed: int, made: dict[int, list[str]], hashed: bool = False, matches=(), sites=None) -> Schedule:
    """The schedule of `seed` for a run whose ranks made the calls `made` ({rank: the ops of its traced calls, in
    order, waits aside}) unperturbed; the same seed and calls give the same schedule. `hashed`: the program makes
    calls in the order of a set (`sandbox.seeded`), which separate processes iterate each in its own order: the
    first HASH_TRIES seeds give the even and the odd ranks two new string-hash seeds (such a run starts zygotes of
    its own). `matches`: (rank, k, src) for each receive without src and each rank that sent to it: the next seeds
    give each receive each sender's message, one per seed. Then each call is held in turn (`holds`),
    for PASSES_S[0] seconds, then again for PASSES_S[1], one call per seed and nothing else, so that the calls a
    program makes are each tried; later seeds are drawn at random: start delays for about half of the ranks, one
    rank held before one of its calls, about a third of them a slow rank too. `sites`: {(rank, k): the call in
    words}, for the schedule's `about`."""
    if not made:
        raise ValueError("a schedule is drawn for the ranks of a run: none given.")
    n = max(made) + 1
    i = seed - HASH_TRIES if hashed and n > 1 else seed  # which of the schedules below
    if i < 1:
        rng = random.Random(seed)
        return Schedule(seed=seed, start=(0.0,) * n, hash_seeds=tuple(rng.randrange(1, 2**32) for _ in range(2)))
    sites = sites or {}
    if i <= len(matches):
        r, k, src = matches[i - 1]
        return Schedule(seed=seed, start=(0.0,) * n, match=(r, k, src), about=sites.get((r, k)))
    i -= len(matches)
    tried = holds(made)
    if i <= len(PASSES_S) * len(tried):
        r, k = tried[(i - 1) % len(tried)]
        return Schedule(seed=seed, start=(0.0,) * n, hold=(r, k, PASSES_S[(i - 1) // len(tried)]),
                        about=sites.get((r, k)))
    rng = random.Random(seed)
    start = tuple(round(rng.uniform(0, START_S), 3) if rng.random() < 0.5 else 0.0 for _ in range(n))
    rank = rng.randrange(n)
    hold = (rank, rng.randint(1, max(1, len(made.get(rank, ())))), rng.choice(HOLDS_S))
    slow = (rng.randrange(n), rng.choice(SLOW_S)) if rng.random() < 1 / 3 else None
    return Schedule(seed=seed, start=start, hold=hold, slow=slow, about=sites.get(hold[:2]))


def seed_of(env: dict) -> int | None:
    """The seed of the schedule an environment (`Schedule.env`) gives a run, or None (an unperturbed run)."""
    s = parsed(env.get(ENV))
    return s.get("seed") if s else None


def parsed(raw: str | None) -> dict | None:
    """The schedule a rank was given (`ENV`'s value), or None; a malformed one is None (the run is not perturbed)."""
    if not raw:
        return None
    try:
        s = json.loads(raw)
    except ValueError:
        return None
    return s if isinstance(s, dict) else None
