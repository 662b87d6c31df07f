"""A ThreadPoolExecutor used to write evaluation shards in the background,
never shut down (no `with`, no .shutdown()), with most of its 12 tasks still
queued when the main code returns.

Plain Python at the end: concurrent.futures.thread registers an exit hook with
threading._register_atexit; at interpreter shutdown it wakes the workers, which
drain the whole queue before exiting, and the workers are joined before atexit
runs. So all twelve shard_{i:02d}_rank{R}.txt files must exist, each with its
full 3 lines, and the done-callback log callbacks_rank{R}.txt must list all
twelve shards (sorted when written by the atexit hook, so order does not depend
on thread scheduling).

Pattern: `pool = ThreadPoolExecutor(4); pool.submit(save_shard, ...)` at module
or trainer level, common in checkpoint/eval writers; the stdlib docs say
"all threads enqueued to ThreadPoolExecutor will be joined before the
interpreter can exit".
"""
import atexit
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

OUT = os.environ["OUT_DIR"]
RANK = os.environ.get("RANK", "0")

pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="shard-writer")
done = []
done_lock = threading.Lock()


def save_shard(i):
    time.sleep(0.05)
    with open(os.path.join(OUT, f"shard_{i:02d}_rank{RANK}.txt"), "w") as f:
        for line in range(3):
            f.write(f"shard {i} line {line} value {i * 100 + line}\n")
    return i


def on_done(fut):
    with done_lock:
        done.append(fut.result())


@atexit.register
def write_callback_log():
    with open(os.path.join(OUT, f"callbacks_rank{RANK}.txt"), "w") as f:
        f.write(f"{len(done)} shards done: {sorted(done)}\n")


def main():
    for i in range(12):
        pool.submit(save_shard, i).add_done_callback(on_done)


if __name__ == "__main__":
    main()
