"""What every rank runs for `python -m sandbox.repro`: one variant of one bug, plus (on rank 0, for a variant that
must match one) the single-process reference, computed with no distributed code at all."""
import importlib
import os


def run(module: str, variant: str, kwargs: dict) -> dict:
    mod = importlib.import_module(module)
    out = {"value": getattr(mod, variant)(**kwargs)}
    if variant == "fixed" and hasattr(mod, "reference") and os.environ.get("RANK") == "0":
        out["reference"] = mod.reference(world_size=int(os.environ["WORLD_SIZE"]), **kwargs)
    return out
