"""dist-sandbox: a simulated cluster on one machine for learning and debugging distributed PyTorch.

    from sandbox import launch
    res = launch(my_module.train, world_size=4)      # N real gloo ranks, forked from one torch import
    res.verdict, res.diagnosis.summary               # "hang", "Collective mismatch at call #1 of group ..."
"""
import importlib

# What `from sandbox import ...` gives, imported on first use (PEP 562): every process that imports a part of the
# package imports this file first, and the launcher's modules (the judge, the diagnoses, the contracts: 0.1 s) are no
# part of a zygote, a sibling zygote, a rank, `repro --list` or the docs build's readers.
_PUBLIC = {"launch": "sandbox.launcher", "run_script": "sandbox.launcher", "UsageError": "sandbox.launcher",
           "Interrupted": "sandbox.launcher", "RunResult": "sandbox.result", "RankResult": "sandbox.result"}
__all__ = ["launch", "run_script", "RunResult", "RankResult", "UsageError", "Interrupted"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'sandbox' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


def load_ipython_extension(ip) -> None:
    """`%load_ext sandbox`: the `%%sandbox` cell magic (see sandbox.magic)."""
    from sandbox import magic

    magic.load(ip)


def unload_ipython_extension(ip) -> None:
    from sandbox import magic

    magic.unload(ip)
