"""Run a program under the schedules a real cluster could give it, and replay the one that fails.

    python -m sandbox.run --explore 16 -n 4 train.py      # 16 schedules after one unperturbed run
    python -m sandbox.run --replay 7 -n 4 train.py        # schedule 7 again

First the program runs as it is. If that run fails there is nothing to explore: its report is the answer. Otherwise
its trace says which calls each rank made, and each explored run gets the schedule of one seed
(`sandbox.schedules.drawn`: each receive from any rank given each rank that sent to it, one rank held before
each of its calls in turn, then start delays, holds and a slow rank at random), seeds 1 to K,
so an exploration is the same every time it is run. Its answer ends at the first run that fails (or, with `every`,
holds all K) and reports each distinct outcome with the seeds that gave it; `replay(seed)` runs the unperturbed
program once more (for its calls) and then the seed's schedule. Runs fork from one warm zygote (after the first, a
run costs a fork; string-hash seeds start zygotes of their own), three at once (`explore`, JOBS).
"""
from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field
from typing import Callable

from sandbox import schedules, words
from sandbox.calls import RECVS, SENDS
from sandbox._run.options import Interrupted
from sandbox._run.stop import interrupt_others, noted_signals
from sandbox.result import RunResult
from sandbox.schedules import Schedule

Start = Callable[[dict], RunResult]  # start one run with this extra environment for the ranks; its result


def outcome(res: RunResult) -> str:
    """What a run came to, in the words that tell two outcomes apart: 'ok', 'ok, warned [buffer_written]' (it
    finished, breaking a contract), or the verdict, the diagnosis kind and the culprit ranks ('error [rank_error]
    rank 1'; 'error [rank_error] on every rank' where every rank raised)."""
    if res.ok:
        kinds = sorted({w.kind for w in res.warnings})
        return f"ok, warned [{', '.join(kinds)}]" if kinds else "ok"
    d = res.diagnosis
    who = f" {words.ranks(sorted(d.culprit_ranks))}" if d.culprit_ranks else ""
    if res.world_size > 1 and all(r.outcome == "error" for r in res.ranks):
        who = " on every rank"  # each raised: which one did first (the diagnosis' culprit) is the schedule's luck
    return f"{res.verdict} [{d.kind}]{who}"


def set_ordered(res: RunResult) -> list[str]:
    """The calls of the run that sit in a loop over a set, or take a value made from one (`sandbox.seeded.hash_order`):
    what separate processes, each with its own string-hash seed, can do in different orders; in words, one per
    call site ('the loop at train.py:30 iterates `metrics`')."""
    from sandbox.seeded import hash_order

    out = []
    for site in sorted({e.get("site") for e in res.events if e.get("ev") == "enter" and e.get("site")}):
        why = hash_order(site)
        if why and why.get("loop"):
            out.append(f"the loop at {why['loop']} iterates `{why['iter']}`")
        elif why:
            out.append(f"the call at {site} takes a value made from `{why.get('iter') or why.get('hash')}`")
    return out


def calls_made(res: RunResult) -> dict[int, list[str]]:
    """{rank: the ops of the traced calls it entered, in order}, waits on a Work aside: what a schedule's hold
    counts (every rank listed)."""
    made: dict[int, list[str]] = {r.rank: [] for r in res.ranks}
    for (r, _), e in sorted(numbered(res).items()):
        made[r].append(e.get("op"))
    return made


def numbered(res: RunResult) -> dict[tuple[int, int], dict]:
    """{(rank, k): the enter event of that rank's k-th traced call}, waits on a Work aside: the calls a schedule
    counts."""
    out, count = {}, {r.rank: 0 for r in res.ranks}
    for e in res.events:
        if e.get("ev") == "enter" and e.get("op") != "wait" and e.get("rank") in count:
            count[e["rank"]] += 1
            out[(e["rank"], count[e["rank"]])] = e
    return out


def sites(calls: dict[tuple[int, int], dict]) -> dict[tuple[int, int], str]:
    """{(rank, k): 'recv at train.py:30'}: each call of `numbered` in words, for a schedule's `about`; a call a
    thread other than the main one made says which ('all_reduce at train.py:20 in thread metrics-logger'): a hold
    there lets the rank's other threads run on."""
    return {rk: f"{e.get('op')} at {e.get('site') or '?'}" + (f" in thread {e['thread']}" if e.get("thread") else "")
            for rk, e in calls.items()}


def senders(calls: dict[tuple[int, int], dict]) -> list[tuple[int, int, int]]:
    """(rank, k, src) for each receive without src the run made (rank's call k: `recv`, `irecv`,
    `recv_object_list`) and each rank that sent to it (`send`, `isend`, `send_object_list`, or in
    `batch_isend_irecv`) on its group with its tag: the senders a cluster's order of arrival
    could give it. The one whose message it took in this run is tried too, so that the list is the same whichever
    arrived first (a replay draws it from a run of its own). One per (rank, call site, sender): a loop's receives
    are tried at their first turn."""
    sent: dict[tuple, set[int]] = {}  # (to, group, tag) -> the ranks that sent
    for (r, _), e in calls.items():
        ops = e.get("p2p") if e.get("op") == "batch_isend_irecv" else [e]
        for o in ops or ():
            if o.get("op") in SENDS and isinstance(o.get("peer"), int):
                sent.setdefault((o["peer"], e.get("gname"), o.get("tag", 0)), set()).add(r)
    out, seen = [], set()
    for (r, k), e in sorted(calls.items(), key=lambda c: (c[0][1], c[0][0])):
        if e.get("op") not in RECVS or e.get("peer") is not None:
            continue
        for src in sorted(sent.get((r, e.get("gname"), e.get("tag", 0)), set()) - {r}):
            if (r, e.get("site"), src) not in seen:
                seen.add((r, e.get("site"), src))
                out.append((r, k, src))
    return out


def plan(res: RunResult) -> dict:
    """What the unperturbed run `res` offers `schedules.drawn`, as its keyword arguments: the calls each rank made,
    whether they follow a set's order, each receive from any rank with each sender, and each call in words."""
    calls = numbered(res)
    return {"made": calls_made(res), "hashed": bool(set_ordered(res)), "matches": senders(calls),
            "sites": sites(calls)}


@dataclass
class Explored:
    """An exploration: the unperturbed run, then each explored schedule with its run, in seed order."""
    baseline: RunResult
    asked: int
    runs: list[tuple[Schedule, RunResult]] = field(default_factory=list)

    @property
    def failed(self) -> tuple[Schedule | None, RunResult] | None:
        """The first failing run, with its schedule (None for the unperturbed run), or None."""
        if not self.baseline.ok:
            return None, self.baseline
        return next(((s, r) for s, r in self.runs if not r.ok), None)

    @property
    def ok(self) -> bool:
        return self.failed is None

    @property
    def result(self) -> RunResult:
        """The run to show: the first that failed, else the unperturbed one."""
        failed = self.failed
        return failed[1] if failed else self.baseline

    def __str__(self) -> str:
        return self.summary() + ("" if self.ok else "\n\n" + self.result.text(logs=True))

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str:  # Jupyter: the summary, then the failing run as a run shows itself
        from html import escape

        return f"<pre>{escape(self.summary())}</pre>" + ("" if self.ok else self.result._repr_html_())

    def outcomes(self) -> dict[str, list[Schedule]]:
        """{outcome: the schedules that gave it}, in the order first seen."""
        seen: dict[str, list[Schedule]] = {}
        for s, r in self.runs:
            seen.setdefault(outcome(r), []).append(s)
        return seen

    def summary(self, replay: Callable[[int], str] | None = None) -> str:
        """A few lines: how many schedules, each distinct outcome with its seeds and the first one's schedule in
        words, and how to replay a failing one; where every run passed, what was explored."""
        if not self.baseline.ok:
            return f"The program fails without any perturbation ({outcome(self.baseline)}): nothing to explore."
        n = self.baseline.world_size
        lines = [f"Explored {words.plural(len(self.runs), 'schedule')} of {words.plural(n, 'rank')} after one "
                 f"unperturbed run" + (f", stopped at the first failure ({len(self.runs)} of {self.asked})"
                                       if len(self.runs) < self.asked else "") + ":"]
        for said, ss in self.outcomes().items():
            seeds = ", ".join(str(s.seed) for s in ss)
            lines.append(f"  {said}: {words.plural(len(ss), 'run')} (seed{'s' if len(ss) > 1 else ''} {seeds})")
            if not said.startswith("ok"):
                lines.append(f"    seed {ss[0].seed}: {ss[0].words()}")
                if ss[0].hash_seeds:
                    lines.append(f"    each process iterates a set of strings in its own order: "
                                 f"{'; '.join(set_ordered(self.baseline))}")
                if replay is not None:
                    lines.append(f"    replay: {replay(ss[0].seed)}")
        if self.ok:
            lines.append(f"  every run finished: {self.explored()}")
        return "\n".join(lines)

    def explored(self) -> str:
        """What the runs tried, in words: '8 of the 8 calls the ranks make held before they start (0.4 and 0.8 s); 3
        runs with ranks started late (up to 300 ms); 1 run with a slow rank'."""
        total = sum(len(ops) for ops in calls_made(self.baseline).values())
        pairs = {s.hold[:2] for s, _ in self.runs if s.hold}
        secs = sorted({s.hold[2] for s, _ in self.runs if s.hold})
        said = [f"{len(pairs)} of the {words.plural(total, 'call')} the ranks make held before they start ("
                f"{words.listed([f'{x:g}' for x in secs])} s)"]
        matched = [s.match for s, _ in self.runs if s.match]
        if matched:
            said.append(f"{words.plural(len({m[:2] for m in matched}), 'receive')} from any rank given each of "
                        f"{words.plural(len({m[2] for m in matched}), 'sender')}")
        hashed = sum(1 for s, _ in self.runs if s.hash_seeds)
        if hashed:
            said.append(f"{words.plural(hashed, 'run')} with other string-hash seeds (the program's calls follow a "
                        "set's order)")
        late = sum(1 for s, _ in self.runs if any(s.start))
        slow = sum(1 for s, _ in self.runs if s.slow)
        if late:
            said.append(f"{words.plural(late, 'run')} with ranks started late (up to {schedules.START_S * 1000:.0f}"
                        " ms)")
        if slow:
            said.append(f"{words.plural(slow, 'run')} with a slow rank")
        return "; ".join(said)


JOBS = 3  # explored runs up at once: a run spends most of its time with one rank held asleep and the others waiting
# (on GPUs, one at a time: each run's ranks take one GPU each)
POLL_S = 0.1  # how often the main thread, waiting on runs up in its threads, looks for a signal it noted


def explore(start: Start, k: int, *, every: bool = False, jobs: int = JOBS) -> Explored:
    """The unperturbed run, then up to `k` schedules (seeds 1..k), stopping at the first failure unless `every`.

    Up to `jobs` schedules run at once, in waves of consecutive seeds, and are settled in seed order, so the answer
    is the one running them one after another gives: every seed up to the first that failed, none after it. A run
    that failed while others were up is run again alone before it counts (copies of a program that writes a fixed
    file can trip over each other): its run alone is the one kept. Ctrl-C or SIGTERM stops every run that is up and
    raises `Interrupted`."""
    if not (isinstance(k, int) and k >= 1):
        raise ValueError(f"explore takes a number of schedules, at least 1, not {k!r}.")
    got = Explored(baseline=start({}), asked=k)
    if not got.baseline.ok:
        return got
    offered = plan(got.baseline)
    jobs = max(1, jobs)
    seed = 1
    while seed <= k:
        wave = [schedules.drawn(x, **offered) for x in range(seed, min(k, seed + jobs - 1) + 1)]
        seed += len(wave)
        ran = [start(wave[0].env())] if len(wave) == 1 else _at_once(start, wave, got.baseline)
        for s, res in zip(wave, ran):  # in seed order: a lower seed's error or failure is the answer
            if isinstance(res, BaseException):
                raise res
            if not res.ok and len(wave) > 1:
                res = start(s.env())  # alone, as --replay runs it
            got.runs.append((s, res))
            if not res.ok and not every:
                return got
    return got


def _at_once(start: Start, wave: list[Schedule], baseline: RunResult) -> list:
    """Each schedule of `wave` run in a thread of its own, all at once; their results (or what each raised), in
    order. The runs have no signal handlers there: this thread notes SIGINT and SIGTERM (if it is the main thread),
    passes them on to every run up (`interrupt_others`, each poll, so that one still starting gets it too) and, once
    every run is over, raises `Interrupted` (the lowest seed's, with where its ranks were)."""
    held: list[int] = []
    with noted_signals(held), concurrent.futures.ThreadPoolExecutor(len(wave), thread_name_prefix="explore") as pool:
        futures = [pool.submit(start, s.env()) for s in wave]
        while not all(f.done() for f in futures):
            concurrent.futures.wait(futures, timeout=POLL_S)
            if held:
                interrupt_others(held[0])
    out = [f.exception() or f.result() for f in futures]
    if held:
        stopped = next((e for e in out if isinstance(e, Interrupted)), None)
        raise stopped or Interrupted(next((r for r in out if isinstance(r, RunResult)), baseline), held[0])
    return out


def replay(start: Start, seed: int) -> tuple[Schedule, RunResult]:
    """Seed `seed`'s schedule again: one unperturbed run for the calls each rank makes, then the schedule's run."""
    if not (isinstance(seed, int) and seed >= 1):
        raise ValueError(f"a seed is a whole number from 1, not {seed!r}.")
    first = start({})
    s = schedules.drawn(seed, **plan(first))
    return s, start(s.env())


def started(run: Callable[..., RunResult], env: dict | None = None) -> Start:
    """A `Start` from a function that starts one run with an `env=` keyword (Run(...).run, run_script, launch):
    `env` the caller's own, the schedule's added to it."""
    return lambda extra: run(env={**(env or {}), **extra})
