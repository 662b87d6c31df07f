"""A daemon "heartbeat/progress" thread that is still working when the main
code returns: it has written and flushed "beat 0", then written "beat 1" into
its file's buffer without flushing, and is waiting (up to 10 s) before writing
"beat final".

Plain Python at the end: daemon threads are not waited for; they are stopped
abruptly at shutdown, their frames are never unwound, so their `with` blocks
never exit and their file objects are never closed or flushed. So
heartbeat_rank{R}.txt must hold exactly "beat 0\\n": "beat 1" (buffered) and
"beat final" (never reached) must NOT be there, and the program must end at
once (well under the 10 s wait). main_rank{R}.txt ("main done") is written by
the main thread before it returns.

Pattern: progress/heartbeat/watchdog threads started with daemon=True so they
"don't block exit"; threading docs: "Daemon threads are abruptly stopped at
shutdown. Their resources (such as open files, database transactions, etc.)
may not be released properly."
"""
import os
import threading

OUT = os.environ["OUT_DIR"]
RANK = os.environ.get("RANK", "0")


def heartbeat(started, stop):
    with open(os.path.join(OUT, f"heartbeat_rank{RANK}.txt"), "w") as f:
        f.write("beat 0\n")
        f.flush()
        f.write("beat 1\n")        # stays in the buffer
        started.set()
        stop.wait(10)              # never set
        f.write("beat final\n")


def main():
    started, stop = threading.Event(), threading.Event()
    threading.Thread(target=heartbeat, args=(started, stop), daemon=True,
                     name="heartbeat").start()
    started.wait(5)
    with open(os.path.join(OUT, f"main_rank{RANK}.txt"), "w") as f:
        f.write("main done\n")


if __name__ == "__main__":
    main()
