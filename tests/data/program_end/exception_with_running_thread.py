"""The main code raises (loss became NaN) while a non-daemon thread is still
writing a metrics file; the script has its own sys.excepthook (as error
reporters like Sentry or a "log the crash to a file" hook install) and an
atexit hook.

Plain Python at the end: the uncaught exception goes to sys.excepthook first;
then the interpreter waits for non-daemon threads; then atexit hooks run; exit
code 1. So:
  writer_rank{R}.txt must hold "row 0".."row 9" and "writer done" (the thread
    was not cut short by the exception in the main thread);
  events_rank{R}.txt must read, in this order:
    excepthook: ValueError: loss is NaN at step 3
    atexit: writer alive=False rows=10
(the hook saw the exception; by the time atexit ran the writer had finished).

Pattern: crash-reporting excepthooks (e.g. sentry_sdk's excepthook
integration, "log uncaught exceptions to file" recipes) combined with
background metric/ckpt writer threads.
"""
import atexit
import os
import sys
import threading
import time

OUT = os.environ["OUT_DIR"]
RANK = os.environ.get("RANK", "0")
EVENTS = os.path.join(OUT, f"events_rank{RANK}.txt")
rows = []


def event(line):
    with open(EVENTS, "a") as f:
        f.write(line + "\n")


def hook(etype, value, tb):
    event(f"excepthook: {etype.__name__}: {value}")
    sys.__excepthook__(etype, value, tb)


sys.excepthook = hook


def writer(started):
    with open(os.path.join(OUT, f"writer_rank{RANK}.txt"), "w") as f:
        for i in range(10):
            f.write(f"row {i}\n")
            f.flush()
            rows.append(i)
            if i == 0:
                started.set()
            time.sleep(0.04)
        f.write("writer done\n")


worker = None


@atexit.register
def at_exit():
    event(f"atexit: writer alive={worker.is_alive()} rows={len(rows)}")


def train_step(step):
    if step == 3:
        raise ValueError(f"loss is NaN at step {step}")


def main():
    global worker
    started = threading.Event()
    worker = threading.Thread(target=writer, args=(started,), name="metrics-writer")
    worker.start()
    started.wait(5)
    for step in range(10):
        train_step(step)


if __name__ == "__main__":
    main()
