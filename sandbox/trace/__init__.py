"""The tracer: every public torch.distributed call of a rank, recorded on entry and on exit.

Each call writes one JSON line before it starts ("enter") and one after it returns or raises ("exit") to a
per-rank file opened with O_APPEND. The enter line is in the kernel before the call can block, so it reaches
whoever reads the file even if the call never returns or the process is killed. The lines and their fields are
`sandbox.events`' (the one place the trace format is written down); the ops and what must match across ranks are
`sandbox.calls`'; this package only reads calls off torch and writes them down.

An event carries the op, the group (its global ranks and its name), the per-group sequence number of
collectives, the shapes/dtypes/devices of the rank's contribution, the root or peer, the reduce op, the splits of
an all_to_all, and the user's call site (the first frame outside torch and the sandbox's plumbing).

Its parts, one job each:

- `ops`: wrapping torch.distributed from the op table (`install`, `uninstall`, `paused`);
- `describe`: a call's fields, read from its arguments;
- `record`: the enter and exit lines;
- `inflight`: the watcher of NCCL calls that returned to Python but still run on the GPU;
- `sink`: this rank's trace file (`start`, `finish`, `emit`, `note`, `set_sink`);
- `tracebacks`: a rank's error as the user's program would show it;
- `__main__`: the entry for torchrun.

Inside the sandbox `sandbox.rank` installs it. Under torchrun use the CLI:

    torchrun --nproc-per-node 4 -m sandbox.trace --trace-dir traces/ train.py --lr 0.1
    python -m sandbox.diagnose traces/
"""
from sandbox.calls import OPS, Op
from sandbox.trace.describe import group_info
from sandbox.trace.ops import install, paused, uninstall
from sandbox.trace.record import forget_groups
from sandbox.trace.sink import emit, finish, note, set_sink, start
from sandbox.trace.tracebacks import error_site, user_traceback

__all__ = ["OPS", "Op", "emit", "error_site", "finish", "forget_groups", "group_info", "install", "note", "paused",
           "set_sink", "start", "uninstall", "user_traceback"]
