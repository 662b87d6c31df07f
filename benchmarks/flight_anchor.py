"""Against the anchor: the same Flight Recorder dumps read by `torchfrtrace` (shipped with torch) and by
`python -m sandbox.diagnose`, case by case, judged against a label written here.

    .venv/bin/python benchmarks/flight_anchor.py --quick        # examples/framework only
    .venv/bin/python benchmarks/flight_anchor.py [--json | --markdown] [--cases ddp_uneven,kv-sync] [--keep]
    python benchmarks/flight_anchor.py --gpu                      # NCCL, torch's own dumps (a GPU machine)

Each case runs under plain torchrun, with nothing of the sandbox in its ranks: on gloo through benchmarks/fr_dump.py
(gloo never writes a dump by itself), on NCCL (--gpu) as the script alone with TORCH_NCCL_DUMP_ON_TIMEOUT=1, so the
dumps are the ones torch writes on a watchdog timeout (--runner adds fr_dump.py there too). A job that stops moving
is ended: when its ranks have used (almost) no CPU and no dump has changed for --quiet-s seconds (0: never; the
default under --gpu, where the watchdog must fire first), or after --timeout seconds; SIGTERM to torchrun's process
group, then SIGKILL, then every rank it started that is still alive (each rank is a session of its own). Both tools
then read the same directory, each bounded by --tool-timeout.

Cases: the scripts in examples/framework/ and the catalogue's broken variants (`sandbox/bugs/`), the latter started
by a small driver that calls `sandbox.bugs._entry.run` the way the catalogue's runner does. Each case's label is its
culprit ranks (the catalogue's own `Expect.culprits` for a bug) and the user's lines: every line marked `# BUG` in
the file plus the lines of the call that makes the bad collective (a pattern per case, below). A tool gets "cause"
when it reports a problem at an op the label names, "culprit" when the ranks it names are the label's, "line" when it
names one of the label's lines. A tool that fails gets the last line of its error instead.

Imports only torch (in --gpu, to count GPUs), the standard library and this repository's sandbox.bugs (its
registry, read without torch), so it runs where nothing else is installed. Without `tabulate` torchfrtrace may
fail: that is recorded in its column ("(tabulate missing)"), not raised.
"""
from __future__ import annotations

import argparse, json, os, re, shutil, signal, subprocess, sys, tempfile, time  # noqa: E401
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "nccl_trace_rank_"
FR_DUMP = os.path.join(ROOT, "benchmarks", "fr_dump.py")
IDLE_CPU = 0.05  # CPU seconds per rank per second below which a rank counts as blocked (dumping costs ~0.01)
# (name, ranks, culprits, ops the cause is made of, pattern of the call line); None culprits: the label names none
FRAMEWORK = [("ddp_uneven", 4, [3], ("all_reduce",), r"loss\.backward\(\)"),
             ("ddp_unused", 4, [0], ("all_reduce",), r"loss\.backward\(\)"),
             ("ddp_wider", 4, [1], ("all_gather", "broadcast"), r"model = DDP\("),
             ("a2a_splits", 4, [2], ("all_to_all",), r"dist\.all_to_all_single\("),
             ("shape_mismatch", 4, [3], ("all_reduce",), r"dist\.all_reduce\(t\)"),
             ("extra_allreduce", 2, [0], ("all_reduce",), r"dist\.all_reduce\(t\)  # BUG")]
NCCL_EXAMPLES = {"extra_allreduce"}  # the other examples call init_process_group("gloo") themselves
BUG_CALLS = {"aux-data": (("all_reduce", "all_gather"), r"dist\.all_reduce\(status"),
             "gather-uneven": (("all_gather",), r"dist\.all_gather\(out, mine\)"),
             "group-order": (("new_group", "barrier", "all_gather"), r"g = dist\.new_group\(ranks\)"),
             "init-port": (("init",), r"init_worker\(f\"tcp"),
             "isend-unwaited": (("send", "recv"), r"dist\.isend\("),
             "kv-sync": (("send", "recv"), r"^ {12}dist\.send\(cache\[layer\]\[[01]\], dst=p\)"),  # not the fix's
             "resample-desync": (("broadcast", "all_gather"), r"dist\.all_gather_object\(pool|dist\.broadcast\(prompts")}
DRIVER = '''"""One catalogue bug's variant on this rank, as sandbox.bugs.runner runs it, under plain torchrun."""
import json, os, sys
sys.path.insert(0, {root!r})
import torch
if torch.cuda.is_available():  # --gpu: one GPU per rank, as the sandbox's launcher gives each rank
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
from sandbox.bugs import _entry
print(_entry.run(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])), flush=True)
'''


@dataclass
class Case:
    name: str
    ranks: int
    argv: list = field(default_factory=list)   # the script and its arguments
    culprits: list | None = None
    ops: tuple = ()
    file: str = ""                              # the user's file the lines are in
    lines: list = field(default_factory=list)
    skip: str = ""                              # why it is not run here

    def label(self) -> str:
        who = "-" if self.culprits is None else ",".join(map(str, self.culprits))
        return f"rank {who} @ {os.path.basename(self.file)}:{','.join(map(str, self.lines))}"


def _lines(path: str, call: str) -> list[int]:
    with open(path, encoding="utf-8") as f:
        return [i for i, text in enumerate(f, 1) if "# BUG" in text or re.search(call, text)]


def cases(*, quick: bool, gpu: bool, driver: str, only: set[str]) -> list[Case]:
    out, gpus = [], _gpus() if gpu else 0
    for name, n, culprits, ops, call in FRAMEWORK:
        path = os.path.join(ROOT, "examples", "framework", name + ".py")
        skip = ("gloo only: the script calls init_process_group(\"gloo\")" if name not in NCCL_EXAMPLES else
                f"needs {n} GPUs" if gpus < n else "") if gpu else ""
        out.append(Case(name=name, ranks=n, argv=[path], culprits=culprits, ops=ops, file=path,
                        lines=_lines(path, call), skip=skip))
    if not quick:
        from sandbox.bugs import culprit_ranks, registry  # reads the modules' source: no torch here
        for slug, bug in registry().items():
            if only and slug not in only:
                continue
            path = os.path.join(ROOT, *bug.module.split(".")) + ".py"
            ops, call = BUG_CALLS.get(slug, ((), r"(?!)"))  # (?!) matches nothing: BUG lines only
            n, skip = (min(bug.world_size, gpus), "") if gpu else (bug.world_size, "")
            if gpu:
                skip = "no GPU form" if bug.gpu is None else (
                    f"needs {bug.gpu.min_world_size} GPUs" if n < bug.gpu.min_world_size else "")
            elif bug.needs != "cpu":
                skip = f"needs {bug.needs} hardware (the sandbox simulates it; plain torchrun has none)"
            expect = bug.expect("broken", gpu and bug.gpu is not None)
            out.append(Case(name=slug, ranks=n, ops=ops, file=path, lines=_lines(path, call), skip=skip,
                            culprits=None if expect.culprits is None else culprit_ranks(expect.culprits, n),
                            argv=[driver, bug.module, "broken", json.dumps({} if skip else _options(bug, n, gpu))]))
    return [c for c in out if not only or c.name in only]


def _options(bug, n, gpu):
    with open(os.path.join(ROOT, *bug.module.split(".")) + ".py", encoding="utf-8") as f:
        if "\ndef options(" not in f.read():
            return {}  # the others take no keyword arguments; importing them here would import torch for nothing
    from sandbox.bugs.runner import options
    return options(bug, n, gpu)


def _gpus() -> int:
    import torch
    return torch.cuda.device_count()


# ---- running one job ----------------------------------------------------------------------------------------------
def _proc_stat(pid: int):
    """(ppid, cpu seconds, start time) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):  # it ended between listing and reading
        return None
    if rest[0] in "ZX":
        return None
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK"), rest[19]


def _children(ppid: int) -> dict:
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit() and (st := _proc_stat(int(p))) and st[0] == ppid:
            kids[int(p)] = st
    return kids


def _dump_files(d: str) -> list[str]:
    return sorted(n for n in os.listdir(d) if n.startswith(PREFIX) and n[len(PREFIX):].isdigit())


def run_job(case: Case, *, work: str, gpu: bool, runner: bool, timeout: float, quiet_s: float) -> dict:
    dumps = os.path.join(work, "dumps")
    os.makedirs(dumps)
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE="2000", TORCH_FR_DUMP_TEMP_FILE=os.path.join(dumps, PREFIX),
               PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.pop("FR_DUMP_DIR", None)
    if gpu:  # torch's own dumps, by NCCL's watchdog after a 20 s group timeout (fr_dump.py sets it, dumps nothing)
        env.update(TORCH_NCCL_DUMP_ON_TIMEOUT="1", FR_PG_TIMEOUT_S="20", FR_DUMP_OWN="0")
        runner = True
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU run even on a GPU machine: the catalogue's code takes its gloo path
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    cmd = [torchrun if os.path.exists(torchrun) else sys.executable, *([] if os.path.exists(torchrun) else
           ["-m", "torch.distributed.run"]), "--standalone", "--nproc-per-node", str(case.ranks),
           *([FR_DUMP] if runner else []), *case.argv]
    t0, seen, samples, ended = time.monotonic(), {}, [], "exit"  # seen: every rank's pid -> its start time
    with open(os.path.join(work, "job.log"), "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        while proc.poll() is None:
            now = time.monotonic()
            if now - t0 > timeout:
                ended = "timeout"
                break
            ranks = _children(proc.pid)
            seen.update({pid: st[2] for pid, st in ranks.items()})
            sig = [(n, os.stat(os.path.join(dumps, n)).st_mtime_ns) for n in _dump_files(dumps)]
            samples.append((now, sum(st[1] for st in ranks.values()), sig, sorted(ranks)))
            old = [s for s in samples if s[0] <= now - quiet_s]
            if quiet_s and ranks and old:
                base = old[-1]
                window = samples[samples.index(base):]
                if all(s[2] == sig and s[3] == sorted(ranks) for s in window) and \
                        samples[-1][1] - base[1] < IDLE_CPU * quiet_s * len(ranks):
                    ended = "hung"
                    break
                del samples[:samples.index(base)]
            time.sleep(0.25)
        wall = time.monotonic() - t0
        left = _stop(proc, seen) if ended != "exit" else _stop(None, seen)
    return {"ended": ended, "rc": proc.returncode, "wall_s": round(wall, 1), "left_running": left,
            "dumps": len(_dump_files(dumps)), "dump_dir": dumps}


def _stop(proc, seen: dict) -> list[int]:
    """End torchrun (SIGTERM to its group, then SIGKILL), then any rank it started that is still alive; the pids
    that could not be ended (should be none)."""
    if proc is not None:
        for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:  # it ended on its own meanwhile
                break
            try:
                proc.wait(wait)  # torchrun passes SIGTERM on to its ranks and waits for them
                break
            except subprocess.TimeoutExpired:
                continue
    alive = lambda pid, start: (st := _proc_stat(pid)) is not None and st[2] == start  # noqa: E731  same process
    for pid, start in seen.items():
        if alive(pid, start):
            try:
                os.killpg(pid, signal.SIGKILL)  # a rank leads a session of its own (torchrun's start_new_session)
            except ProcessLookupError:  # it ended on its own meanwhile
                pass
    time.sleep(0.2 if seen else 0)
    return [pid for pid, start in seen.items() if alive(pid, start)]


# ---- the two readers --------------------------------------------------------------------------------------------
def _tool(cmd: list, timeout: float) -> tuple[int | None, str, str, float]:
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, start_new_session=True)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired as e:  # run() has killed it; what it printed so far is all there is
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, out, f"timed out after {timeout:.0f} s", time.monotonic() - t0


def _last_line(text: str) -> str:
    return ([ln.strip() for ln in text.splitlines() if ln.strip()] or ["(no output)"])[-1]


def _line_verdict(case: Case, text: str) -> str:
    base = re.escape(os.path.basename(case.file))  # "file.py:17" (both tools) or 'file.py", line 17' (a traceback)
    named = sorted({int(a or b) for a, b in re.findall(base + r':(\d+)|' + base + r'", line (\d+)', text)})
    if any(n in case.lines for n in named):
        return f"yes ({','.join(str(n) for n in named if n in case.lines)})"
    return f"no ({','.join(map(str, named))})" if named else "none named"


def _culprit_verdict(case: Case, named: set[int]) -> str:
    ok = "n/a" if case.culprits is None else "yes" if named == set(case.culprits) else "no"
    return f"{ok} ({','.join(map(str, sorted(named)))})" if named else "none named"


def frtrace(case: Case, dumps: str, timeout: float) -> dict:
    exe = os.path.join(os.path.dirname(sys.executable), "torchfrtrace")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace"]
    rc, out, err, t = _tool([*cmd, dumps, "--prefix", PREFIX], timeout)
    text = out + err
    row = {"s": round(t, 1), "rc": rc}
    if rc != 0 or "Traceback (most recent call last)" in text:
        missing = "(tabulate missing) " if "tabulate is not installed" in text else ""
        return {**row, "failed": missing + _last_line(err or out)}
    found = re.search(r"Not all ranks joining collective|Culprit rank|mismatch", text, re.I)
    ops = re.findall(r"collective: (\S+)", text)
    named = {int(r) for r in re.findall(r"Culprit rank (\d+)", text)}
    for group in re.findall(r"missing ranks: \{([\d, ]+)\}", text):
        named |= {int(r) for r in group.split(",")}
    cause = "no finding" if not found else (
        f"{'yes' if any(o in op for o in case.ops for op in ops) else 'no'} ({', '.join(dict.fromkeys(ops)) or '?'})")
    return {**row, "cause": cause, "culprit": _culprit_verdict(case, named), "line": _line_verdict(case, text)}


def diagnose(case: Case, dumps: str, timeout: float) -> dict:
    rc, out, err, t = _tool([sys.executable, "-m", "sandbox.diagnose", dumps, "--prefix", PREFIX, "--json"], timeout)
    row = {"s": round(t, 1), "rc": rc}
    try:
        res = json.loads(out)
    except ValueError:  # not a verdict: the reader stopped with a message (or a traceback) instead
        return {**row, "failed": _last_line(err or out)}
    d = res.get("diagnosis") or {}
    calls = (d.get("details") or {}).get("calls") or {}  # a mismatch: each rank's call, the label's op among them
    said = " ".join(str(x) for x in (d.get("op"), *calls.values())).lower()
    cause = f"no finding ({res.get('verdict')})" if res.get("verdict") == "ok" or not d else (
        f"{'yes' if any(o in said for o in case.ops) else 'no'} ({d.get('kind')}: {d.get('op')} #{d.get('seq')})")
    where = json.dumps({k: d.get(k) for k in ("site", "cause", "summary", "details")})
    return {**row, "verdict": res.get("verdict"), "summary": d.get("cause") or d.get("summary"), "cause": cause,
            "culprit": _culprit_verdict(case, set(d.get("culprit_ranks") or [])), "line": _line_verdict(case, where)}


# ---- the table --------------------------------------------------------------------------------------------------
COLUMNS = ["case", "N", "run", "dumps", "label", "fr: cause", "fr: culprit", "fr: line", "fr: s",
           "sd: cause", "sd: culprit", "sd: line", "sd: s"]


def _cells(r: dict, width: int | None) -> list[str]:
    cut = (lambda s: s if width is None or len(s) <= width else s[:width - 3] + "...")  # noqa: E731
    if r.get("skip"):
        return [r["case"], str(r["N"]), "skipped", "-", r["label"], *["-"] * 8]
    job = r["job"]
    run = {"exit": f"exit {job['rc']}", "hung": "hung, stopped", "timeout": "timeout"}[job["ended"]]
    cells = [r["case"], str(r["N"]), f"{run} ({job['wall_s']} s)", f"{job['dumps']}/{r['N']}", r["label"]]
    for tool in ("frtrace", "diagnose"):
        x = r[tool]
        cells += ([cut("FAILED: " + x["failed"]), "-", "-"] if "failed" in x else
                  [cut(x["cause"]), x["culprit"], x["line"]]) + [str(x["s"])]
    return cells


def render(rows: list[dict], markdown: bool) -> str:
    heads = [c.replace("fr:", "torchfrtrace:").replace("sd:", "diagnose:") for c in COLUMNS]
    body = [_cells(r, None if markdown else 44) for r in rows]
    if markdown:
        esc = lambda s: s.replace("|", "\\|")  # noqa: E731
        return "\n".join(["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads),
                          *("| " + " | ".join(esc(c) for c in b) + " |" for b in body), *notes(rows)])
    widths = [max(len(x[i]) for x in [COLUMNS, *body]) for i in range(len(COLUMNS))]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    lines = [fmt(COLUMNS), fmt(["-" * w for w in widths]), *map(fmt, body), "",
             "fr = torchfrtrace DIR --prefix nccl_trace_rank_; sd = python -m sandbox.diagnose DIR --prefix "
             "nccl_trace_rank_ --json; run = how the job ended: exit (torchrun's code), hung (stopped when idle) or timeout"]
    return "\n".join(lines + notes(rows))


def notes(rows: list[dict]) -> list[str]:
    """The skipped cases and the tools' failures, in full (the table cuts them)."""
    skips = [f"- {r['case']}: {r['skip']}" for r in rows if r.get("skip")]
    fails = [f"- {r['case']}: {'torchfrtrace' if tool == 'frtrace' else 'sandbox.diagnose'}: {r[tool]['failed']}"
             for r in rows for tool in ("frtrace", "diagnose") if not r.get("skip") and "failed" in r[tool]]
    left = [f"- {r['case']}: still running after the kill: pids {r['job']['left_running']}" for r in rows
            if not r.get("skip") and r["job"]["left_running"]]
    return [*(["", "skipped:", *skips] if skips else []), *(["", "failures, in full:", *fails] if fails else []),
            *(["", "LEFT RUNNING:", *left] if left else [])]


def totals(rows: list[dict]) -> str:
    ran = [r for r in rows if not r.get("skip")]
    out = []
    for tool, name in (("frtrace", "torchfrtrace"), ("diagnose", "sandbox.diagnose")):
        n = lambda key: sum(r[tool].get(key, "").startswith("yes") for r in ran)  # noqa: E731
        failed = sum("failed" in r[tool] for r in ran)
        out.append(f"{name}: cause {n('cause')}/{len(ran)}, culprit {n('culprit')}/"
                   f"{sum(r['culprits'] is not None for r in ran)}, line {n('line')}/{len(ran)}, failed {failed}")
    return "; ".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/flight_anchor.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="only the examples/framework cases")
    p.add_argument("--gpu", action="store_true", help="NCCL cases, torch's own dumps on a watchdog timeout")
    p.add_argument("--runner", action="store_true", help="with --gpu: wrap the ranks in fr_dump.py as on gloo")
    p.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    p.add_argument("--timeout", type=float, help="seconds a job may run (default 45; 150 with --gpu)")
    p.add_argument("--quiet-s", type=float, help="end a job idle this long (default 3; 0 = never, the --gpu default)")
    p.add_argument("--tool-timeout", type=float, default=60.0, help="seconds each reader may take")
    p.add_argument("--keep", action="store_true", help="keep the dumps and job logs (their folder is printed)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--markdown", action="store_true")
    a = p.parse_args(argv)
    timeout = a.timeout or (150.0 if a.gpu else 45.0)
    quiet_s = a.quiet_s if a.quiet_s is not None else (0.0 if a.gpu else 3.0)
    if a.gpu and _gpus() < 2:
        print(f"flight_anchor: --gpu needs at least 2 GPUs; this machine has {_gpus()}.", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="flight_anchor_")
    try:
        driver = os.path.join(work, "bug_driver.py")
        with open(driver, "w") as f:
            f.write(DRIVER.format(root=ROOT))
        only = {c for c in a.cases.split(",") if c}
        todo = cases(quick=a.quick, gpu=a.gpu, driver=driver, only=only)
        if only - {c.name for c in todo}:
            print(f"flight_anchor: no case named {', '.join(sorted(only - {c.name for c in todo}))}.", file=sys.stderr)
            return 2
        rows = []
        for i, c in enumerate(todo, 1):
            row = {"case": c.name, "N": c.ranks, "label": c.label(), "culprits": c.culprits, "lines": c.lines,
                   "file": os.path.relpath(c.file, ROOT), "skip": c.skip}
            if not c.skip:
                job = run_job(c, work=os.path.join(work, c.name), gpu=a.gpu, runner=a.runner or not a.gpu,
                              timeout=timeout, quiet_s=quiet_s)
                row.update(job=job, frtrace=frtrace(c, job["dump_dir"], a.tool_timeout),
                           diagnose=diagnose(c, job["dump_dir"], a.tool_timeout))
            print(f"flight_anchor: [{i}/{len(todo)}] {c.name}: " + (f"skipped ({c.skip})" if c.skip else
                  f"{row['job']['ended']} in {row['job']['wall_s']} s, {row['job']['dumps']} dumps; torchfrtrace "
                  f"{row['frtrace']['s']} s, sandbox.diagnose {row['diagnose']['s']} s"), file=sys.stderr, flush=True)
            rows.append(row)
        if a.json:
            print(json.dumps({"mode": "nccl" if a.gpu else "gloo", "rows": rows, "totals": totals(rows)}, indent=2))
        else:
            print(render(rows, a.markdown) + "\n\n" + totals(rows))
        return 0
    finally:
        if a.keep:
            print(f"flight_anchor: dumps and logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)  # our own temp folder; a leftover file is no reason to fail


if __name__ == "__main__":
    sys.exit(main())
