"""Objects that clean up in their finalizers at interpreter teardown:
  * a module-level MetricsWriter whose __del__ prints "END" into its file
    (print(..., file=...)) and closes it; an atexit hook prints a summary
    line through the same writer first;
  * a module-level data generator, suspended mid-iteration, whose `finally:`
    records that it was closed.

Plain Python at the end: atexit hooks run before module teardown, so the
summary lands before "END"; when __main__'s globals are cleared, the writer's
refcount drops to zero and __del__ runs; the suspended generator is closed
(GeneratorExit at its yield), so its `finally:` runs. So:
  metrics_rank{R}.txt must hold "step 0".."step 299", "summary: 300 steps"
    and then "END";
  loader_rank{R}.txt must hold "batch 0".."batch 2" then
    "loader closed after 3 batches".

Pattern: __del__-based cleanup in logger/writer classes (e.g. simple
"Logger" classes in research code that close their file in __del__), and
generators with try/finally used as data iterators that are abandoned
mid-epoch.
"""
import atexit
import os

OUT = os.environ["OUT_DIR"]
RANK = os.environ.get("RANK", "0")


class MetricsWriter:
    def __init__(self, path):
        self.f = open(path, "w")
        self.n = 0

    def log(self, text):
        print(text, file=self.f)
        self.n += 1

    def __del__(self):
        print("END", file=self.f)
        self.f.close()


def batches(path):
    out = open(path, "w")
    n = 0
    try:
        while True:
            print(f"batch {n}", file=out)
            n += 1
            yield n
    finally:
        print(f"loader closed after {n} batches", file=out)
        out.close()


writer = MetricsWriter(os.path.join(OUT, f"metrics_rank{RANK}.txt"))
loader = batches(os.path.join(OUT, f"loader_rank{RANK}.txt"))


@atexit.register
def _summary():
    writer.log(f"summary: {writer.n} steps")


for step in range(300):
    writer.log(f"step {step} loss {1.0 / (step + 1):.6f}")
for _ in range(3):
    next(loader)
