"""What every rank runs for a catalogue run (`sandbox.bugs.run_variant`): one variant of one bug, or a learner's
fix in its place, plus (on rank 0, for the fixed variant) the module's single-process reference, computed with no
distributed code at all, to compare every rank's value with."""
import importlib
import json
import os
import pickle
import sys

from sandbox import rundir


def run(module: str, variant: str, kwargs: dict, fix: bytes | None = None) -> dict:
    mod = importlib.import_module(module)
    fn = pickle.loads(fix) if fix is not None else getattr(mod, variant)  # a fix travels cloudpickled, by value
    out = {"value": fn(**kwargs)}
    # the fixed variant must match the reference; a broken one that finishes wrong must differ from it
    bug = getattr(mod, "BUG", None)  # a module run as a bug without a record (tests) has no broken expectation
    wants_reference = variant == "fixed" or (bug is not None and bug.expect(variant).differs_from_reference)
    if wants_reference and hasattr(mod, "reference") and os.environ.get("RANK") == "0":
        out["reference"] = mod.reference(world_size=int(os.environ["WORLD_SIZE"]), **kwargs)
    return out


def main(argv: list[str]) -> int:
    """`python -m sandbox.bugs._entry MODULE VARIANT KWARGS_JSON`: one variant in a worker that torchrun started (a
    bug whose module says it runs under torchrun, `launcher(variant)`); the value goes where the sandbox's own ranks
    put theirs, `result-<RANK>.pkl` in the run's directory, so both launchers are judged alike."""
    module, variant, kwargs = argv[0], argv[1], json.loads(argv[2])
    out = run(module, variant, kwargs)
    with open(rundir.result(os.environ["SANDBOX_RUN_DIR"], int(os.environ["RANK"])), "wb") as f:
        pickle.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
