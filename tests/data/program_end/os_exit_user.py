"""The user ends the program with os._exit(7) (a common workaround for
hangs at interpreter shutdown), after writing a results file in two parts:
the first part flushed explicitly, the second still in the buffer; an atexit
hook and a `finally:` block are pending.

Plain Python at the end: os._exit terminates the process immediately: no
`finally`, no atexit hooks, no flushing of Python-level buffers; exit code 7.
So:
  results_rank{R}.txt must hold exactly "part 1: flushed\\n" (the second part
    "part 2: buffered, lost" must NOT appear);
  atexit_rank{R}.txt and finally_rank{R}.txt must NOT exist.

Pattern: `os._exit(0)` at the end of distributed/multiprocess training
scripts to skip a hanging teardown; Python docs on os._exit: "Exit the process
... without calling cleanup handlers, flushing stdio buffers, etc."
"""
import atexit
import os

OUT = os.environ["OUT_DIR"]
RANK = os.environ.get("RANK", "0")


@atexit.register
def _never():
    with open(os.path.join(OUT, f"atexit_rank{RANK}.txt"), "w") as f:
        f.write("atexit ran\n")


def main():
    results = open(os.path.join(OUT, f"results_rank{RANK}.txt"), "w")
    results.write("part 1: flushed\n")
    results.flush()
    results.write("part 2: buffered, lost\n")
    try:
        os._exit(7)
    finally:
        with open(os.path.join(OUT, f"finally_rank{RANK}.txt"), "w") as f:
            f.write("finally ran\n")


if __name__ == "__main__":
    main()
