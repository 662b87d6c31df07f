"""A "crash-safe" checkpoint save done wrong: state is json.dump'ed into a
tempfile.NamedTemporaryFile(delete=False) and renamed over the final name with
os.replace WITHOUT flushing or closing it first; a second scratch
NamedTemporaryFile (default delete=True) is left open.

Plain Python at the end: the rename moved the inode, and the temp file
object's buffer is flushed into it when the object is finalized at teardown,
so ckpt_rank{R}.json must hold the complete JSON state (it was empty on disk
right after os.replace). The delete=True scratch file is closed and unlinked
by its finalizer, so no file whose name starts with "scratch_rank{R}_" may be
left in OUT_DIR, and no "*.tmp" file either. (Temp names are random, so a
leftover shows up as an extra file name.)

Pattern: tempfile + os.replace "atomic write" recipes that forget
f.flush()/os.fsync() before the rename, a known source of empty checkpoint
files after crashes.
"""
import json
import os
import tempfile

OUT = os.environ["OUT_DIR"]
RANK = os.environ.get("RANK", "0")

state = {"step": 1234, "weights": [round(i * 0.001, 3) for i in range(200)],
         "optimizer": {"lr": 0.0003, "betas": [0.9, 0.999]}}

tmp = tempfile.NamedTemporaryFile("w", delete=False, dir=OUT,
                                  prefix=f"ckpt_rank{RANK}_", suffix=".tmp")
json.dump(state, tmp, sort_keys=True)
os.replace(tmp.name, os.path.join(OUT, f"ckpt_rank{RANK}.json"))

scratch = tempfile.NamedTemporaryFile("w", dir=OUT, prefix=f"scratch_rank{RANK}_")
scratch.write("intermediate activations\n" * 100)
