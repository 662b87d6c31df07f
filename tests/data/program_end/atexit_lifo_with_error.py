"""Several atexit hooks, as a trainer registers them: save_state (first),
a hook with arguments that writes a summary, and cleanup_scratch (last) which
raises because the scratch directory it expects is missing.

Plain Python at the end: atexit runs hooks in reverse order of registration;
an exception in one hook is printed ("Exception ignored in atexit callback")
and the remaining hooks still run; the exit code stays 0. So
atexit_order_rank{R}.txt must read, in this order:
  cleanup_scratch: start
  summary: best_loss=0.125 epochs=3
  save_state
and state_rank{R}.json must hold {"epoch": 3, "best_loss": 0.125, "step": 300}.

Pattern: atexit.register(save_checkpoint) as a "save on exit" safety net
(e.g. in many RL/training codebases); docs of atexit: "functions are executed
in reverse order"; "If an exception is raised during execution of the exit
handlers, a traceback is printed ... and the exception information is saved".
"""
import atexit
import json
import os

OUT = os.environ["OUT_DIR"]
RANK = os.environ.get("RANK", "0")
ORDER = os.path.join(OUT, f"atexit_order_rank{RANK}.txt")

state = {"epoch": 0, "best_loss": None, "step": 0}


def note(line):
    with open(ORDER, "a") as f:
        f.write(line + "\n")


def save_state():
    note("save_state")
    with open(os.path.join(OUT, f"state_rank{RANK}.json"), "w") as f:
        json.dump(state, f, sort_keys=True)


def summary(prefix, **kw):
    note(prefix + " " + " ".join(f"{k}={v}" for k, v in kw.items()))


def cleanup_scratch():
    note("cleanup_scratch: start")
    os.rmdir(os.path.join(OUT, f"scratch_that_does_not_exist_rank{RANK}"))
    note("cleanup_scratch: end")   # never reached


def main():
    atexit.register(save_state)
    for epoch in range(1, 4):
        state["epoch"] = epoch
        state["step"] = epoch * 100
        state["best_loss"] = 1.0 / 2 ** epoch
    atexit.register(summary, "summary:", best_loss=state["best_loss"], epochs=state["epoch"])
    atexit.register(cleanup_scratch)


if __name__ == "__main__":
    main()
