"""A background "checkpoint upload" thread (non-daemon, the default) still
running when the main code returns: the script saves a checkpoint, starts the
uploader and falls off the end without joining it.

Plain Python at the end: before atexit and module teardown, the interpreter
joins every non-daemon thread (threading._shutdown), so the upload finishes:
uploaded_ckpt_rank{R}.bin must equal ckpt_rank{R}.bin (64 KiB, copied in 16
chunks with a 30 ms pause each, ~0.5 s), and upload_done_rank{R}.txt must say
"uploaded 65536 bytes in 16 chunks".

Pattern: asynchronous checkpoint uploads to object storage from a training loop
(e.g. huggingface_hub's upload_folder(run_as_future=True), or a hand-written
threading.Thread(target=upload) after torch.save), relying on Python waiting for
non-daemon threads.
"""
import os
import threading
import time

OUT = os.environ["OUT_DIR"]
RANK = os.environ.get("RANK", "0")
SRC = os.path.join(OUT, f"ckpt_rank{RANK}.bin")
DST = os.path.join(OUT, f"uploaded_ckpt_rank{RANK}.bin")
CHUNK = 4096


def upload(src, dst):
    n = 0
    size = 0
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while True:
            block = fin.read(CHUNK)
            if not block:
                break
            time.sleep(0.03)          # network latency
            fout.write(block)
            n += 1
            size += len(block)
    with open(os.path.join(OUT, f"upload_done_rank{RANK}.txt"), "w") as f:
        f.write(f"uploaded {size} bytes in {n} chunks\n")


def main():
    state = bytes((i * 7 + 3) % 256 for i in range(16 * CHUNK))
    with open(SRC, "wb") as f:
        f.write(state)
    threading.Thread(target=upload, args=(SRC, DST), name="uploader").start()
    # main returns at once; the upload is still in flight


if __name__ == "__main__":
    main()
