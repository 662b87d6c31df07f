"""An atexit hook that does the final sync in a worker thread (so it can put a
timeout on it): it starts a thread that writes the final artifact in 8 chunks
and joins it with timeout=10.

Plain Python at the end (3.11): atexit hooks run after the non-daemon threads
were joined, but a thread may still be started from a hook and joined there;
the thread runs to completion. So final_sync_rank{R}.txt must hold
"chunk 0".."chunk 7" and "sync complete", and atexit_rank{R}.txt must read
"atexit: start sync" then "atexit: sync joined alive=False".
(Python 3.12+ refuses to start threads at this point with RuntimeError, and
the hook would record that instead; compare with plain python on the same
interpreter.)

Pattern: "finish/sync on exit with a timeout" hooks: an atexit hook that runs
the upload in a thread and joins it with a timeout so a stuck network call
cannot hang the exit (experiment trackers' finish-on-exit logic does this).
"""
import atexit
import os
import threading
import time

OUT = os.environ["OUT_DIR"]
RANK = os.environ.get("RANK", "0")


def note(line):
    with open(os.path.join(OUT, f"atexit_rank{RANK}.txt"), "a") as f:
        f.write(line + "\n")


def sync():
    with open(os.path.join(OUT, f"final_sync_rank{RANK}.txt"), "w") as f:
        for i in range(8):
            time.sleep(0.02)
            f.write(f"chunk {i}\n")
        f.write("sync complete\n")


@atexit.register
def final_sync():
    note("atexit: start sync")
    t = threading.Thread(target=sync, name="final-sync")
    try:
        t.start()
    except RuntimeError as e:          # Python 3.12+
        note(f"atexit: cannot start thread: {e}")
        return
    t.join(timeout=10)
    note(f"atexit: sync joined alive={t.is_alive()}")


def main():
    pass  # training happened here


if __name__ == "__main__":
    main()
