"""The zygote: one process that imports torch once, then forks every rank of a run from that warm state.

It is started by `sandbox.launcher` with its own session (so the whole run is one process group the parent can end
with one signal), reads the run's spec from the file named by SANDBOX_SPEC (then deletes it), forks the ranks,
hosts the rendezvous store on a socket bound to 127.0.0.1 (like torchrun's agent store), and reports each rank's
pid and exit status on stdout as JSON lines. A rank that fails before its user code runs exits with code 70, its
traceback in its log (or in the zygote's stderr, `zygote.log`, if the log could not be opened).
If the parent dies, the kernel sends the zygote SIGTERM (PR_SET_PDEATHSIG); it then ends its ranks and removes
the run's directory, so nothing is left behind. Ranks die with the zygote the same way.

A warm zygote (`--warm`, one per launching process, e.g. a Jupyter kernel) imports torch once and then serves many
runs: for each it forks a child that becomes that run's zygote, in its own process group, so a second run costs a
fork instead of an import, and runs share nothing (fresh ranks, fresh store, the user's modules imported after the
fork). It dies with its launcher, and its runs die with it. Shared (`sandbox.warm.share`: the test suite's lab
kernels fork their runs from their test worker's), it also serves other processes that connect to its socket;
each such run ends itself once the process that asked for it is gone (it checks, and its pipe to it breaks).

What training scripts import lazily (`torch._dynamo`) is imported here once, before the fork, when the run's code
needs it, rather than by every rank on its own: `sandbox.preload` says what, when, and why.

`python -m sandbox._zygote` runs `__main__`; `run` is one run, `serve` the warm zygote, `siblings` the zygotes of
further hash seeds, and `common` what they share (the pipe to the launcher, what was forked, the signal handling).
"""
