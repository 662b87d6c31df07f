"""A compressed text log (gzip) opened at module level and never closed:
io.TextIOWrapper over gzip.GzipFile over a plain file, lines written in a
loop. (mtime=0 and an empty header filename keep the bytes deterministic and
rank-independent; gzip.open(path, "wt") would embed both.)

Plain Python at the end: at module teardown the TextIOWrapper is deallocated;
IOBase's finalizer closes it, which closes the GzipFile: it flushes the
compressor and writes the gzip trailer (CRC32 + size), then the underlying file
is flushed and closed. So events_rank{R}.jsonl.gz must be a complete, valid
gzip stream whose text is 3000 lines '{"step": i, "loss": ...}'. A program
end that skips finalizers leaves a truncated stream with no trailer.

Pattern: `gzip.open("events.jsonl.gz", "wt")` as a module-level event log
that is never closed (TensorBoard-like event writers, jsonl.gz loggers).
"""
import gzip
import io
import json
import os

OUT = os.environ["OUT_DIR"]
RANK = os.environ.get("RANK", "0")

raw = open(os.path.join(OUT, f"events_rank{RANK}.jsonl.gz"), "wb")
events = io.TextIOWrapper(gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0),
                          encoding="utf-8")
del raw  # only the gzip stream holds the file now, as with gzip.open

for step in range(3000):
    events.write(json.dumps({"step": step, "loss": round(3.0 / (step + 1), 6)}) + "\n")
