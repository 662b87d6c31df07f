"""A metrics CSV opened at module level with pathlib.Path.open and written
through csv.writer, never closed or flushed. About 60 KB are written, so the
default 8 KiB buffer has flushed most of it during the run, but the tail is
still in the buffer when the main code returns.

Plain Python at the end: when the interpreter tears down __main__ the file
object is deallocated and IOBase's finalizer closes (and so flushes) it, so
metrics_rank{R}.csv must hold the header and all 2000 rows, last row
"1999,...", ending with "\\r\\n" (csv's default line terminator).

Pattern: very common in research training scripts
(`f = open("log.csv", "w"); writer = csv.writer(f)` at the top, no close).
"""
import csv
import os
import pathlib

OUT = pathlib.Path(os.environ["OUT_DIR"])
RANK = os.environ.get("RANK", "0")

metrics_file = (OUT / f"metrics_rank{RANK}.csv").open("w", newline="")
writer = csv.writer(metrics_file)
writer.writerow(["step", "loss", "lr", "note"])

for step in range(2000):
    loss = 2.5 / (1 + step * 0.01)
    lr = 0.001 * min(1.0, (step + 1) / 100)
    writer.writerow([step, f"{loss:.6f}", f"{lr:.6g}", "warmup" if step < 100 else "train"])
