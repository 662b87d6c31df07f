"""dist-sandbox: a simulated cluster on one machine for learning and debugging distributed PyTorch.

    from sandbox import launch
    res = launch(my_module.train, world_size=4)      # N real gloo ranks, forked from one torch import
    res.verdict, res.diagnosis.summary               # "hang", "Collective mismatch at call #1 of group ..."
"""
from sandbox.launcher import Interrupted, UsageError, launch, run_script
from sandbox.result import RankResult, RunResult

__all__ = ["launch", "run_script", "RunResult", "RankResult", "UsageError", "Interrupted"]
__version__ = "0.1.0"


def load_ipython_extension(ip) -> None:
    """`%load_ext sandbox`: the `%%sandbox` cell magic (see sandbox.magic)."""
    from sandbox import magic

    magic.load(ip)


def unload_ipython_extension(ip) -> None:
    from sandbox import magic

    magic.unload(ip)
