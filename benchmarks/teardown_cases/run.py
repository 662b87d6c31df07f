"""Hung jobs ended by their launcher: does the offline diagnosis still say "hang"?

For each case: start torchrun (the sandbox's tracer in its workers) in a session of its own, wait until the
job is stuck, SIGTERM torchrun's process group (as a user or a scheduler would), let torchrun end its workers,
then run `python -m sandbox.diagnose DIR --json` and record the verdict and kind. Exit code 0 always.

    python benchmarks/teardown_cases/run.py [--repeat K] [--only NAME ...] [--keep DIR]
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VENV = ROOT / ".venv" / "bin"

# (script, ranks)
CASES = [
    ("send_cycle.py", 2),
    ("op_mismatch.py", 3),
    ("skip_step.py", 3),
    ("recv_no_send.py", 2),
    ("barrier_vs_all_reduce.py", 3),
    ("send_ring.py", 4),
]

STUCK_QUIET_S = 3.0  # the trace dir has not changed for this long: stuck
STUCK_MAX_S = 60.0  # never wait longer than this for the job to get stuck
TERM_WAIT_S = 30.0  # after SIGTERM, wait this long for torchrun, then SIGKILL
DIAGNOSE_TIMEOUT_S = 120.0


def proc_start(pid):
    """A process's start time (clock ticks since boot), to tell it from a later one with the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[19]  # field 22, counted from after the command name


def descendants(root_pid):
    """{pid: start time} of every process below root_pid."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = {}, [root_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            start = proc_start(child)
            if start is not None:
                found[child] = start
                todo.append(child)
    return found


def snapshot(trace_dir):
    """What the trace dir holds now: names and sizes."""
    state = []
    for path in sorted(trace_dir.glob("*")):
        try:
            state.append((path.name, path.stat().st_size))
        except OSError:
            pass
    return tuple(state)


def wait_stuck(proc, trace_dir, nranks, known):
    """Wait until every rank has a trace file and the dir has not changed for STUCK_QUIET_S (at most STUCK_MAX_S)."""
    t0 = time.monotonic()
    last, since = None, time.monotonic()
    while time.monotonic() - t0 < STUCK_MAX_S:
        if proc.poll() is not None:
            return f"torchrun exited by itself (rc {proc.returncode})"
        known.update(descendants(proc.pid))
        now = snapshot(trace_dir)
        if now != last:
            last, since = now, time.monotonic()
        ranks = sum(1 for name, _ in now if name.startswith("rank-") and name.endswith(".jsonl"))
        if ranks >= nranks and time.monotonic() - since >= STUCK_QUIET_S:
            return f"stuck after {time.monotonic() - t0:.1f} s"
        time.sleep(0.25)
    return f"not quiet after {STUCK_MAX_S:.0f} s"


def kill_leftovers(proc, known):
    """SIGKILL torchrun's group and every process it started that is still alive (each worker leads a group)."""
    if proc.poll() is None:  # not reaped yet, so the pid (and its group) is still ours
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pgid in sorted(known):
        if proc_start(pgid) != known[pgid]:
            continue  # gone, or the pid now belongs to someone else
        try:
            if os.getpgid(pgid) == pgid:
                os.killpg(pgid, signal.SIGKILL)
            else:
                os.kill(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def diagnose(trace_dir):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        out = subprocess.run(
            [str(VENV / "python"), "-m", "sandbox.diagnose", str(trace_dir), "--json"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=DIAGNOSE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return {"verdict": "?", "kind": "diagnose timed out"}
    try:
        data = json.loads(out.stdout)
    except ValueError:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or [""]
        return {"verdict": "?", "kind": f"diagnose rc {out.returncode}: {tail[0][:120]}"}
    diag = data.get("diagnosis") or {}
    return {
        "verdict": data.get("verdict"),
        "kind": diag.get("kind"),
        "culprits": diag.get("culprit_ranks"),
        "summary": (diag.get("summary") or "")[:160],
        "outcomes": [r.get("outcome") for r in data.get("ranks", [])],
    }


def run_once(script, nranks, workdir):
    trace_dir = workdir / "trace"
    trace_dir.mkdir(parents=True)
    log = open(workdir / "torchrun.log", "wb")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # torchrun's own files in the run's folder: by default its agent leaves a /tmp/torchelastic_* for good
    cmd = [str(VENV / "torchrun"), "--standalone", "--nproc-per-node", str(nranks), "--log-dir", str(workdir / "agent"),
           "-m", "sandbox.trace", "--trace-dir", str(trace_dir), str(HERE / script)]
    known = {}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        stuck = wait_stuck(proc, trace_dir, nranks, known)
        known.update(descendants(proc.pid))
        ended = "already ended"
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            t0 = time.monotonic()
            while proc.poll() is None and time.monotonic() - t0 < TERM_WAIT_S:
                known.update(descendants(proc.pid))
                time.sleep(0.1)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
                ended = f"SIGKILLed after {TERM_WAIT_S:.0f} s"
            else:
                ended = f"torchrun rc {proc.returncode} {time.monotonic() - t0:.1f} s after SIGTERM"
    finally:
        kill_leftovers(proc, known)
        log.close()
    result = diagnose(trace_dir)
    result.update(stuck=stuck, ended=ended)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", "-k", type=int, default=5, help="runs per case (default 5)")
    ap.add_argument("--only", nargs="*", help="case names (script names without .py)")
    ap.add_argument("--keep", help="keep every run's trace dir and torchrun log under this folder")
    args = ap.parse_args()

    cases = [(s, n) for s, n in CASES if not args.only or s[:-3] in args.only]
    base = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="teardown_cases-"))
    tally = {}
    t_all = time.monotonic()
    try:
        for script, nranks in cases:
            name = script[:-3]
            for i in range(args.repeat):
                workdir = base / f"{name}-{i}"
                if workdir.exists():
                    shutil.rmtree(workdir)
                t0 = time.monotonic()
                try:
                    r = run_once(script, nranks, workdir)
                except Exception as exc:  # the harness itself failed: record it, go on
                    r = {"verdict": "?", "kind": f"harness error: {exc!r}", "stuck": "", "ended": ""}
                ok = r.get("verdict") == "hang"
                tally.setdefault(name, []).append(ok)
                print(f"{name:<24} run {i + 1}/{args.repeat} {'HANG ' if ok else 'OTHER'} verdict={r.get('verdict')} "
                      f"kind={r.get('kind')} culprits={r.get('culprits')} outcomes={r.get('outcomes')} "
                      f"[{r.get('stuck')}; {r.get('ended')}; {time.monotonic() - t0:.1f} s]", flush=True)
                if not ok and r.get("summary"):
                    print(f"{'':<24}   summary: {r['summary']}", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)

    print()
    print("summary: runs with verdict \"hang\" (expected for every run)")
    total = good = 0
    for name, oks in tally.items():
        print(f"  {name:<24} {sum(oks)}/{len(oks)}")
        total += len(oks)
        good += sum(oks)
    print(f"  {'total':<24} {good}/{total}  ({time.monotonic() - t_all:.0f} s)")
    if args.keep:
        print(f"trace dirs and torchrun logs kept in {base}")
    return 0


if __name__ == "__main__":
    try:
        main()
    finally:
        sys.exit(0)
