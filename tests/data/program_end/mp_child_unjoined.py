"""Two multiprocessing.Process children started by the main code and never
joined: a non-daemon "export" child that writes a file in 5 steps (~0.4 s),
and a daemon "prefetch" child that writes "start", then would sleep 10 s before
writing "end".

Plain Python at the end: multiprocessing registers an exit hook
(multiprocessing.util._exit_function) that terminates the parent's *daemon*
children and then joins the non-daemon ones. So:
  export_rank{R}.txt must hold "export step 0".."export step 4" and
    "export done";
  prefetch_rank{R}.txt must hold exactly "start\\n" ("end" must NOT appear);
and the program must end in well under 10 s.

Pattern: spawning helper processes (exporters, prefetchers, eval workers)
with multiprocessing.Process and not joining them; multiprocessing docs:
"the parent process ... will attempt to terminate all of its daemonic child
processes" and non-daemonic children are joined automatically at exit.
"""
import multiprocessing as mp
import os
import time

OUT = os.environ["OUT_DIR"]
RANK = os.environ.get("RANK", "0")


def export(path):
    with open(path, "w") as f:
        for i in range(5):
            time.sleep(0.08)
            f.write(f"export step {i}\n")
        f.write("export done\n")


def prefetch(path, started):
    with open(path, "w") as f:
        f.write("start\n")
        f.flush()
        started.set()
        time.sleep(10)
        f.write("end\n")


def main():
    started = mp.Event()
    mp.Process(target=export, args=(os.path.join(OUT, f"export_rank{RANK}.txt"),),
               name="exporter").start()
    mp.Process(target=prefetch, args=(os.path.join(OUT, f"prefetch_rank{RANK}.txt"), started),
               name="prefetcher", daemon=True).start()
    started.wait(5)


if __name__ == "__main__":
    main()
