"""The Concepts page's pictures, made at build time from one real run (docs/hooks.py starts `generate` with the
other build-time runs): every primitive on 4 gloo ranks and a ring all-reduce made of isend/irecv
(`sandbox.course.collectives`), drawn with `sandbox.report.diagrams`, and the real timeline of the ring and of
`dist.all_reduce` from that same run (`sandbox.report.timeline`). Nothing is fetched: the site is offline.

The run and the drawing happen in a subprocess (`python docs/diagram_pages.py OUT`): the hook runs its jobs in
threads, and a run's signal handling and matplotlib belong in a process of their own. A page asks for a picture
with `<!-- gen: diagram NAME -->` (NAME: a primitive, `ring` or `ring-timeline`).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUBDIR = os.path.join("assets", "diagrams")  # under the build's generated folder, and under the site
TIMEOUT_S = 300


def _words(mixes, chunked: bool) -> str:
    from sandbox.report import diagrams

    return ", ".join(diagrams.label(tuple(tuple(o) for o in m), chunked) for m in mixes) or "nothing"


def alt_text(prim: dict) -> str:
    """What the picture shows, in words (the image's alt text): every rank's elements before and after."""
    from sandbox.report import diagrams

    chunked = diagrams.names_chunks(prim)  # the same rule as the picture's labels
    sides = []
    for side in ("before", "after"):
        ranks = "; ".join(f"rank {r}: {_words(m, chunked)}" for r, m in enumerate(prim[side]))
        sides.append(f"{side}, {ranks}")
    return f"{prim['name']} on {len(prim['before'])} ranks, from a real run. " + ". ".join(sides)


def main(out_dir: str) -> dict:
    """Run, draw every picture into out_dir/assets/diagrams/, and return what was made (JSON-friendly)."""
    sys.path.insert(0, ROOT)
    from sandbox.course import collectives

    t0 = time.monotonic()
    data, res = collectives.run()
    ran = time.monotonic() - t0
    made = draw_all(data, res, out_dir)
    return {**made, "run_s": round(ran, 2), "draw_s": round(time.monotonic() - t0 - ran, 2)}


def draw_all(data: dict, res, out_dir: str) -> dict:
    """Every picture of a recorded run (`collectives.run()`'s pair) into out_dir/assets/diagrams/: a PNG per
    primitive, `ring.png` and `ring-timeline.png`, and the record itself (`record.json`)."""
    from sandbox import report
    from sandbox.course import collectives
    from sandbox.report import diagrams

    folder = os.path.join(out_dir, SUBDIR)
    os.makedirs(folder, exist_ok=True)
    pictures, alts = {}, {}
    for prim in data["primitives"]:
        path = os.path.join(folder, prim["name"] + ".png")
        diagrams.save(diagrams.draw_primitive(prim), path)
        pictures[prim["name"]], alts[prim["name"]] = path, alt_text(prim)
    pictures["ring"] = diagrams.save(diagrams.draw_ring(data["ring"]), os.path.join(folder, "ring.png"))
    alts["ring"] = ("The ring all-reduce on 4 ranks, step by step, from a real run: 3 reduce-scatter steps, then "
                    "3 all-gather steps, each rank sending one chunk to the next; every rank ends with the sum of "
                    "every chunk, the same as dist.all_reduce")
    pictures["ring-timeline"] = report.timeline(collectives.ring_calls(res),
                                                os.path.join(folder, "ring-timeline.png"))
    alts["ring-timeline"] = ("Timeline of the same run on 4 ranks: the ring's isend, irecv and wait calls, then "
                             "one dist.all_reduce of the same tensor")
    with open(os.path.join(folder, "record.json"), "w", encoding="utf-8") as f:
        json.dump(data, f)
    return {"pictures": {k: os.path.relpath(v, out_dir).replace(os.sep, "/") for k, v in pictures.items()},
            "alts": alts}


def generate(out_dir: str) -> dict:
    """The build's job: main() in a subprocess, bounded; {"rc", "seconds", "stderr", and main's fields}."""
    t0 = time.monotonic()
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), out_dir], cwd=ROOT, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:  # the run bounds its own ranks; this bounds the drawing too
        try:
            os.killpg(p.pid, signal.SIGKILL)  # its whole session: nothing of it outlives the build
        except ProcessLookupError:  # it ended on its own meanwhile
            pass
        p.communicate()
        return {"rc": 124, "seconds": time.monotonic() - t0, "stderr": f"timed out after {TIMEOUT_S} s"}
    out = {"rc": p.returncode, "seconds": round(time.monotonic() - t0, 2), "stderr": stderr[-3000:]}
    if p.returncode == 0:
        out.update(json.loads(stdout.strip().splitlines()[-1]))
    return out


def markdown(name: str, result: dict) -> str:
    """The image for `<!-- gen: diagram NAME -->` on a page at the top of the docs (concepts.md)."""
    if result.get("rc") != 0:
        raise RuntimeError(f"the diagrams' run failed (exit {result.get('rc')}):\n{result.get('stderr')}")
    if name not in result["pictures"]:
        raise KeyError(f"no diagram {name!r}; there are {sorted(result['pictures'])}")
    return f"![{result['alts'][name]}]({result['pictures'][name]})"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python docs/diagram_pages.py OUT_DIR")
    print(json.dumps(main(sys.argv[1])))
