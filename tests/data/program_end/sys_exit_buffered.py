"""Early stopping ends the run with sys.exit(3) from deep inside the training
loop, while a log file opened with a 1 MiB buffer (open(..., buffering=1<<20))
has ~20 KB of unflushed lines written in a loop; an atexit hook records that
it ran.

Plain Python at the end: SystemExit unwinds, no traceback is printed, atexit
hooks run, the module's globals are torn down and the file object's finalizer
flushes its buffer; the exit code is 3. So:
  log_rank{R}.txt must hold "epoch 0 ..".."epoch 399 .." and
    "early stop at epoch 399" (nothing was on disk before exit);
  atexit_rank{R}.txt must read "atexit ran".
The exit code is only visible in the sandbox's per-rank summary.

Pattern: `sys.exit(code)` for early stopping / "nothing to do" exits in
training scripts with open log files (distinct exit codes are what job
schedulers and torchrun report).
"""
import atexit
import os
import sys

OUT = os.environ["OUT_DIR"]
RANK = os.environ.get("RANK", "0")

log = open(os.path.join(OUT, f"log_rank{RANK}.txt"), "w", buffering=1 << 20)


@atexit.register
def _mark():
    with open(os.path.join(OUT, f"atexit_rank{RANK}.txt"), "w") as f:
        f.write("atexit ran\n")


def check_early_stop(epoch, patience_left):
    if patience_left == 0:
        log.write(f"early stop at epoch {epoch}\n")
        sys.exit(3)


def main():
    patience = 400
    for epoch in range(1000):
        log.write(f"epoch {epoch:4d} val_loss {1.0 / (epoch + 1):.8f} no improvement\n")
        patience -= 1
        check_early_stop(epoch, patience)


if __name__ == "__main__":
    main()
