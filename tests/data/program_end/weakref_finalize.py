"""Three weakref.finalize callbacks guarding a trainer's resources:
  * `ckpt`: object still alive at exit, finalizer with atexit=True (default);
  * `cache`: object still alive at exit, finalizer with .atexit = False;
  * `tmp`: object deleted mid-run.

Plain Python at the end: finalize's own atexit hook calls every live finalizer
whose .atexit is true, then marks finalize as shut down, so a finalizer with
atexit=False never runs even when its object is destroyed during teardown.
So:
  finalize_ckpt_rank{R}.txt  must exist:  "ckpt finalized at exit: step=42"
  finalize_cache_rank{R}.txt must NOT exist
  finalize_tmp_rank{R}.txt   must exist:  "tmp finalized when deleted"
and events_rank{R}.txt must read "tmp finalizer ran" then "main done"
(the tmp finalizer runs at `del`, before main ends).

Pattern: weakref.finalize is what the stdlib (tempfile.TemporaryDirectory) and
many libraries use for cleanup on exit; semantics from the weakref docs
("finalize ... atexit: a writable boolean property which by default is true.
When the program exits, it calls all remaining live finalizers for which
atexit is true").
"""
import os
import weakref

OUT = os.environ["OUT_DIR"]
RANK = os.environ.get("RANK", "0")


class Resource:
    pass


def write(name, text):
    with open(os.path.join(OUT, f"{name}_rank{RANK}.txt"), "a") as f:
        f.write(text + "\n")


ckpt = Resource()
cache = Resource()

weakref.finalize(ckpt, write, "finalize_ckpt", "ckpt finalized at exit: step=42")
fin_cache = weakref.finalize(cache, write, "finalize_cache", "cache finalized")
fin_cache.atexit = False


def main():
    tmp = Resource()
    weakref.finalize(tmp, lambda: (write("finalize_tmp", "tmp finalized when deleted"),
                                   write("events", "tmp finalizer ran")))
    del tmp
    write("events", "main done")


if __name__ == "__main__":
    main()
