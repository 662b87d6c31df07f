"""A --keep folder: every raw output of one run, laid out so a person reads it and a test parses it again the way
the live run was parsed (`load` gives back the ToolRun that `save` was given, less the lines' times).

    output.txt              stdout and stderr as they came, up to the wall limit (what the parser saw)
    late.txt                what came after the limit, while the tool was being ended
    sandbox.json            the sandbox's JSON
    dumps/rank_<r>          the Flight Recorder dumps the job wrote
    torchfrtrace.txt        torchfrtrace's output (torchfrtrace.first.txt: its first try, when it was run twice)
    run.json                the commands, exit codes (null: ended at the limit) and times
"""
from __future__ import annotations

import json
import os
import shutil

FRTRACE = ("torchfrtrace.first.txt", "torchfrtrace.txt")


def save(out, folder: str, dumps: str) -> None:
    """`out`'s raw outputs into `folder`, emptied first (`dumps`: where the job's dumps are)."""
    shutil.rmtree(folder, ignore_errors=True)  # ignore: there was none; a stale late.txt must not stay
    os.makedirs(folder)
    files = {"output.txt": out.main.text()}
    late = out.main.text(in_time=False)[len(files["output.txt"]):] if out.main.cut_s is not None else ""
    if late:
        files["late.txt"] = late
    if out.tool == "sandbox":
        files["sandbox.json"] = out.main.text("out", in_time=False)
    for name, c in zip(FRTRACE[-len(out.frtrace):], out.frtrace):
        files[name] = c.text(in_time=False)
    for name, text in files.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    for n in out.dumps:
        os.makedirs(os.path.join(folder, "dumps"), exist_ok=True)
        shutil.copy(os.path.join(dumps, n), os.path.join(folder, "dumps", n))
    meta = {"tool": out.tool, "cmd": out.main.cmd, "exit_code": out.main.exit_code, "wall_s": out.main.wall_s,
            "cut_s": out.main.cut_s, "dumps": out.dumps,
            "frtrace": [{"cmd": c.cmd, "exit_code": c.exit_code, "wall_s": c.wall_s} for c in out.frtrace]}
    with open(os.path.join(folder, "run.json"), "w") as f:
        json.dump(meta, f, indent=1)


def load(folder: str):
    """The tools.ToolRun saved by `save`, as the scoreboard saw it (the lines' times are not kept: they read 0)."""
    from benchmarks.scoring.tools import Captured, ToolRun  # not at the top: tools imports this module

    def read(name):
        with open(os.path.join(folder, name)) as f:
            return f.read()

    with open(os.path.join(folder, "run.json")) as f:
        meta = json.load(f)
    text = read("sandbox.json") if meta["tool"] == "sandbox" else read("output.txt")
    main = Captured(cmd=meta["cmd"], exit_code=meta["exit_code"], wall_s=meta["wall_s"], cut_s=meta["cut_s"],
                    lines=[(0.0, "out", text)])
    names = FRTRACE[-len(meta["frtrace"]):] if meta["frtrace"] else ()
    frtrace = [Captured(cmd=m["cmd"], exit_code=m["exit_code"], wall_s=m["wall_s"], lines=[(0.0, "out", read(n))])
               for n, m in zip(names, meta["frtrace"])]
    return ToolRun(tool=meta["tool"], main=main, frtrace=frtrace, dumps=meta["dumps"])
