"""A training logger whose records are buffered by logging.handlers.MemoryHandler
in front of a FileHandler, never flushed or closed by the script, plus an atexit
hook (registered after `import logging`) that logs a final "shutting down" record.

Plain Python at the end: atexit runs hooks last-registered-first, so the user's
hook runs before logging.shutdown (registered by `import logging`); its record is
buffered too. logging.shutdown() then flushes and closes every handler
(MemoryHandler has flushOnClose=True), so train_rank{R}.log must hold all twelve
records in order: "start", "step 0".."step 9" (one WARNING among them),
"shutting down". Nothing is written to the file before exit (capacity 1000,
flushLevel CRITICAL), so the whole file depends on the end of the program.

Pattern: the logging cookbook's "buffering logging messages and outputting them
conditionally" recipe (MemoryHandler -> FileHandler); the docs of
logging.shutdown: "automatically called at exit ... when the logging module is
imported".
"""
import atexit
import logging
import logging.handlers
import os

OUT = os.environ["OUT_DIR"]
RANK = os.environ.get("RANK", "0")

log = logging.getLogger("trainer")
log.setLevel(logging.INFO)
target = logging.FileHandler(os.path.join(OUT, f"train_rank{RANK}.log"))
target.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
log.addHandler(logging.handlers.MemoryHandler(capacity=1000,
                                              flushLevel=logging.CRITICAL,
                                              target=target))


@atexit.register
def _goodbye():
    log.info("shutting down")


def main():
    log.info("start")
    for step in range(10):
        if step == 7:
            log.warning("step %d: loss spike", step)
        else:
            log.info("step %d", step)


if __name__ == "__main__":
    main()
