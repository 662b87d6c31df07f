"""`python -m sandbox._zygote [--warm | --sibling | --warm-sibling]`: what the launcher starts (the package's
docstring says what each is)."""
from __future__ import annotations

import os
import signal
import socket
import sys

from sandbox import defaults
from sandbox._proc import die_with_parent
from sandbox._zygote import common
from sandbox._zygote.common import SIBLINGS, WARM_SIBLINGS, ending, import_shared
from sandbox._zygote.run import run
from sandbox._zygote.serve import end_warm, serve
from sandbox._zygote.siblings import sibling_main, start_siblings


def main() -> None:
    warm = "--warm" in sys.argv[1:]
    parent = int(os.environ.get("SANDBOX_PARENT_PID", os.getppid()))
    if warm:
        control = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=int(os.environ["SANDBOX_CONTROL_FD"]))
        os.set_inheritable(control.fileno(), False)  # the siblings must not keep it open: closing it ends us
        signal.signal(signal.SIGTERM, end_warm)
    else:
        common.PROTO_FD = os.dup(1)
        os.dup2(2, 1)  # whatever torch or the user's module prints at import goes to the zygote's log
        signal.signal(signal.SIGTERM, ending(os.environ.get("SANDBOX_RUN_DIR"),
                                              os.environ.get("SANDBOX_OWNS_DIR") == "1"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if "--sibling" in sys.argv[1:] or "--warm-sibling" in sys.argv[1:]:
        return sibling_main(warm="--warm-sibling" in sys.argv[1:])
    # a warm zygote dies at once (SIGTERM waits while torch or the preload is imported with it masked, seconds under
    # load); each of its runs then ends itself on its own death signal, as a cold zygote does, its run dir removed
    die_with_parent(signal.SIGKILL if warm else signal.SIGTERM, parent)
    # before torch is imported here: the siblings import it beside this process, on the other cores
    seeds = int(os.environ.get(defaults.HASH_SEEDS_ENV, "1"))
    if warm:
        WARM_SIBLINGS[:] = start_siblings(seeds - 1, warm=True)
    else:
        SIBLINGS[:] = start_siblings(seeds - 1, warm=False)
    if os.environ.get(defaults.HASH_SEED_LIST_ENV):  # the schedule's seed is read: the ranks get the run's env
        os.environ.pop("PYTHONHASHSEED", None)

    import_shared()  # the one import of torch that every rank shares
    if warm:
        serve(control)
    else:
        run(os.environ["SANDBOX_SPEC"], parent)


if __name__ == "__main__":
    main()
    os._exit(0)
