"""Re-record the trace fixtures of test_diagnose_unit.py from real runs: `python tests/record_traces.py [NAME ...]`
(every case, or only those named).

Each case keeps what the diagnosis reads: the per-rank trace (rank-N.jsonl), the stacks fetched at the end
(stack-N.txt), the format's meta.json, and expected.json with each rank's exit code and outcome plus the verdict
the live run gave."""
import json
import os
import shutil
import socket
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import scenarios  # noqa: E402
from sandbox import launch  # noqa: E402

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    PORT = s.getsockname()[1]

CASES = {
    "op_mismatch": (scenarios.op_mismatch, 3, ()),
    "missing_rank": (scenarios.missing_rank, 3, ()),
    "groups_cycle": (scenarios.groups_cycle, 3, ()),
    "exits_early": (scenarios.exits_early, 3, ()),
    "group_lists": (scenarios.group_lists, 3, ()),
    "send_cycle": (scenarios.send_cycle, 2, ()),
    "init_mismatch": (scenarios.init_mismatch, 2, (PORT,)),
    "crash_in_call": (scenarios.crash_in_call, 3, ()),
    "raises": (scenarios.raises, 3, ()),
    "ok_sum": (scenarios.ok_sum, 2, ()),
    "dtype_mismatch": (scenarios.dtype_mismatch, 4, ()),
}

if __name__ == "__main__":
    os.chdir(os.path.dirname(HERE))
    wanted = sys.argv[1:] or list(CASES)
    unknown = sorted(set(wanted) - set(CASES))
    if unknown:
        sys.exit(f"record_traces.py: no case named {', '.join(unknown)}; the cases are {', '.join(CASES)}.")
    for name in wanted:
        fn, n, args = CASES[name]
        tmp = tempfile.mkdtemp()
        res = launch(fn, world_size=n, args=args, trace_dir=tmp, timeout=30)
        out = os.path.join(HERE, "traces", name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        for f in os.listdir(tmp):
            if f.endswith(".jsonl") or f == "meta.json" or (f.startswith("stack-")
                                                             and os.path.getsize(os.path.join(tmp, f))):
                shutil.copy(os.path.join(tmp, f), out)
        shutil.rmtree(tmp)
        meta = {"verdict": res.verdict, "kind": res.diagnosis.kind, "culprit_ranks": res.diagnosis.culprit_ranks,
                "ranks": {str(r.rank): {"exit_code": r.exit_code, "outcome": r.outcome} for r in res.ranks}}
        with open(os.path.join(out, "expected.json"), "w") as f:
            json.dump(meta, f, indent=1)
        print(f"{name:14} {res.verdict:6} {res.diagnosis.kind}")
