"""Which rank-dependent `if` a call was reached through. A collective inside `if rank == 0:` (or under
`is_main_process()`, `if dist.get_rank() != 0`, and the like) is the usual way for ranks to disagree about the
calls they make. Given the frames that led to a call, from a hung rank's stack or a call's own site, this finds the
innermost enclosing `if` whose test reads the rank, by parsing the source files (no torch, no imports of them).
The source of a user's file is read and parsed here once for every rule that reads it: an `if` using a layer
(`branch_using`, the rank-dependent one or any, or a `continue` that skips a module in a loop over them), whether a
function uses something (`function_uses`), a statement that takes a rank past a call (`early_exit`), what hands a
callback or hook only to some ranks (`registered_where`), the data-dependent `if` (`sandbox.diagnose.origins`) and
what a process's own seed decides (`sandbox.seeded`), the last two built on `parsed_source`.
"""
from __future__ import annotations

import ast
import linecache
import re
import threading

from sandbox import _paths
from sandbox.words import shown_path

# names that say "which rank am I" in a test
RANKISH = re.compile(r"(?<![A-Za-z0-9_])(rank|local_rank|global_rank|node_rank|get_rank|get_local_rank|RANK|"
                     r"LOCAL_RANK|is_main_process|is_main|is_master|is_rank_zero|is_rank_0|rank_zero|rank0|"
                     r"is_primary|main_process|is_global_zero|is_local_main_process)(?![A-Za-z0-9_])")
_FRAME = re.compile(r'\s+File "(.+)", line (\d+) in (\S+)')
_trees: dict[str, tuple[ast.AST, str] | None] = {}


def stack_frames(stack: str | None) -> list[tuple[str, int]]:
    """(path, line) of the user's frames in a faulthandler dump's first thread (the one that was dumped from: the
    main thread of a rank blocked in a call), innermost first."""
    out = []
    for i, line in enumerate((stack or "").splitlines()):
        if i > 0 and not line.startswith(" "):
            if out:
                break
            continue
        m = _FRAME.match(line)
        if m and not (_paths.is_plumbing(m.group(1)) or _paths.is_stdlib(m.group(1))):
            out.append((m.group(1), int(m.group(2))))
    return out


def site_frame(site: str | None) -> list[tuple[str, int]]:
    """The one frame of a trace's call site ("dir/file.py:12"): a shown path is the project's, else relative to
    this directory (`sandbox._paths.resolve`, the inverse of how sites are shown)."""
    if not site or ":" not in site:
        return []
    path, _, line = site.rpartition(":")
    return [(_paths.resolve(path), int(line))] if line.isdigit() else []


def frames_of(track, call: dict | None) -> list[tuple[str, int]]:
    """The user's frames that led a rank (a `RankTrack`, or None) to a call: from its stack, else the call's site."""
    return stack_frames(getattr(track, "stack", None)) or site_frame((call or {}).get("site"))


def parsed_source(path: str):
    """(the module's ast, its source) of a user's file, read and parsed once; None when it cannot be."""
    return _tree(path)


# CPython before 3.13 counts the depth of the AST being built in one place per interpreter, not per call: two threads
# in `ast.parse` at once (a run's judge in each of a pool's threads) can corrupt it, and the parse fails with
# "SystemError: AST constructor recursion depth mismatch" (https://github.com/python/cpython/issues/106905 and its
# thread). Every parse of ours takes this lock.
_PARSING = threading.RLock()


def parse(source, path: str):
    """`ast.parse`, one thread at a time across the package."""
    with _PARSING:
        return ast.parse(source, path)


def _tree(path: str):
    with _PARSING:
        return _tree_locked(path)


def _tree_locked(path: str):
    if path not in _trees:
        try:
            try:
                with open(path, encoding="utf-8") as f:
                    src = f.read()
            except OSError:  # a notebook cell has no file, but IPython keeps its source in this process's linecache
                src = "".join(linecache.getlines(path))
                if not src:
                    raise
            _trees[path] = (parse(src, path), src)
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError):  # not Python we can read: no branch from it
            _trees[path] = None
    return _trees[path]


def _span(nodes: list) -> tuple[int, int] | None:
    return (nodes[0].lineno, max(getattr(n, "end_lineno", n.lineno) for n in nodes)) if nodes else None


def rank_branch(frames: list[tuple[str, int]]) -> dict | None:
    """The innermost rank-dependent `if` around the call, looking from the innermost frame out:
    {"test": "rank == 0", "site": "train.py:30", "taken": "if" | "else"}; None if there is none."""
    for path, line in frames:
        parsed = _tree(path)
        if parsed is None:
            continue
        tree, src = parsed
        best = None
        for node in ast.walk(tree):
            if not isinstance(node, ast.If):
                continue
            for taken, body in (("if", node.body), ("else", node.orelse)):
                span = _span(body)
                if span and span[0] <= line <= span[1]:
                    test = ast.get_source_segment(src, node.test) or ""
                    if RANKISH.search(test) and (best is None or node.lineno > best[0].lineno):
                        best = (node, taken, test)
        if best is not None:
            node, taken, test = best
            return {"test": " ".join(test.split()), "site": f"{shown_path(path)}:{node.lineno}", "taken": taken}
    return None


def through(branch: dict) -> str:
    """'through `if rank == 0:` at train.py:30' (or 'through the else of ...')."""
    head = "through" if branch["taken"] == "if" else "through the else of"
    return f"{head} `if {branch['test']}:` at {branch['site']}"


def source_line(site: str | None) -> str | None:
    """The source text of a site's line, stripped ("loss.backward()"), or None when the file cannot be read."""
    frames = site_frame(site)
    if not frames:
        return None
    parsed = _tree(frames[0][0])
    if parsed is None:
        return None
    lines = parsed[1].splitlines()
    n = frames[0][1]
    return lines[n - 1].split("#")[0].strip() or None if 0 < n <= len(lines) else None


def branch_using(paths: list[str], attrs: list[str], *, rank_dependent: bool = True) -> dict | None:
    """An `if` in these files whose body (or else) uses one of these attributes (`self.extra`): {"test", "site",
    "attrs"}, the first in file order; None if there is none. How a forward that skips a layer on some ranks is
    found from the names of the parameters that got no gradient. Also an `if` whose body is a `continue` in a loop
    over one of them (LayerDrop, stochastic depth: `for block in self.blocks: if drop: continue`), with "skips":
    the loop's site. rank_dependent=True: only an `if` whose test reads the rank; False: any (`if image is not
    None:` before `self.vision(image)`, a branch on the data or on a random draw)."""
    want = set(attrs)
    for shown in paths:
        path = _paths.resolve(shown)
        parsed = _tree(path)
        if parsed is None:  # a site we cannot read (a notebook cell, a deleted file): no branch there
            continue
        tree, src = parsed
        loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.AsyncFor))]
        for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.If)), key=lambda n: n.lineno):
            test = ast.get_source_segment(src, node.test) or ""
            if rank_dependent and not RANKISH.search(test):
                continue
            used = sorted({a.attr for part in node.body + node.orelse for a in ast.walk(part)
                           if isinstance(a, ast.Attribute) and a.attr in want})
            if used:
                return {"test": " ".join(test.split()), "site": f"{shown_path(path)}:{node.lineno}", "attrs": used}
            # `for block in self.blocks: if drop: continue`: the `continue` skips this round's use of the module
            if any(isinstance(s, ast.Continue) for s in node.body):
                around = max((lp for lp in loops if lp.lineno < node.lineno <= (lp.end_lineno or lp.lineno)),
                             key=lambda lp: lp.lineno, default=None)
                used = sorted({a.attr for a in ast.walk(around.iter) if isinstance(a, ast.Attribute)
                               and a.attr in want}) if around is not None else []
                if used:
                    return {"test": " ".join(test.split()), "site": f"{shown_path(path)}:{node.lineno}",
                            "attrs": used, "skips": f"{shown_path(path)}:{around.lineno}"}
    return None


def registered_where(site: str | None) -> dict | None:
    """The call at `site` is made by a function, or a method of a class, that the program hands over (registers as a
    hook or callback, appends to a list of plugins, builds as an object) only under a rank-dependent condition
    (`if rank == 0: callbacks.append(Monitor())`, `logger = Logger() if is_main else NullLogger()`): so only those
    ranks ever make it. {"what": the function or class, "func": the function holding the call, "site": where it
    is handed over, "test": the condition, "if_site"}; None if there is no such thing in the call's file."""
    frames = site_frame(site)
    parsed = _tree(frames[0][0]) if frames else None
    if parsed is None:
        return None
    tree, src = parsed
    path, line = frames[0]
    parent = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    holders = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
               and n.lineno <= line <= (n.end_lineno or n.lineno)]
    func = max((n for n in holders if not isinstance(n, ast.ClassDef)), key=lambda n: n.lineno, default=None)
    if func is None:
        return None
    klass = parent.get(func)
    names = [func.name] + ([klass.name] if isinstance(klass, ast.ClassDef) else [])
    for n in sorted(ast.walk(tree), key=lambda n: getattr(n, "lineno", 0)):
        used = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None
        if used not in names or not isinstance(getattr(n, "ctx", None), ast.Load) or n.lineno == func.lineno:
            continue
        if func.lineno <= n.lineno <= (func.end_lineno or func.lineno):
            continue  # a use inside the function itself (a recursive call, self.method)
        up = parent.get(n)
        while up is not None and not isinstance(up, (ast.If, ast.IfExp, ast.FunctionDef, ast.AsyncFunctionDef)):
            up = parent.get(up)
        if isinstance(up, (ast.If, ast.IfExp)):
            test = " ".join((ast.get_source_segment(src, up.test) or "").split())
            if RANKISH.search(test):
                stmt = n
                while parent.get(stmt) is not None and not isinstance(stmt, ast.stmt):
                    stmt = parent[stmt]
                return {"what": used, "func": func.name, "site": f"{shown_path(path)}:{n.lineno}",
                        "handed": " ".join((ast.get_source_segment(src, stmt) or "").split())[:120],
                        "test": test, "if_site": f"{shown_path(path)}:{up.lineno}"}
    return None


def function_uses(site: str | None, text: str) -> bool:
    """Does the innermost function holding this site (the whole file outside any) contain this text
    (".no_sync(": the user's training loop accumulates gradients)? False when the file cannot be read."""
    frames = site_frame(site)
    parsed = _tree(frames[0][0]) if frames else None
    if parsed is None:  # no file to read (a notebook cell, a trace from elsewhere): nothing to say it does
        return False
    tree, src = parsed
    line = frames[0][1]
    holding = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n.lineno <= line <= (n.end_lineno or n.lineno)]
    inner = max(holding, key=lambda n: n.lineno, default=None)
    return text in ((ast.get_source_segment(src, inner) if inner is not None else src) or "")


_EXITS = {ast.Return: "return", ast.Continue: "continue", ast.Break: "break", ast.Raise: "raise"}


def early_exit(site: str | None, without: tuple = ()) -> dict | None:
    """A statement that can take a rank past the call at this site without making it: a `return`, `continue`,
    `break` or `raise` under an `if` that leaves the loop or function the call is in, before the call (or after
    it, in a loop around both: the later rounds are skipped; not `continue`); or an exception caught by an `except`
    around it. The nearest before the call first; statements named in `without` ("break", ...) are passed over. {"stmt", "site", "test", "if_site", "leaves"}; None if there is none.
    How a rank skips a collective its peers make, read from the source alone (which rank took it is the run's to
    say)."""
    frames = site_frame(site)
    parsed = _tree(frames[0][0]) if frames else None
    if parsed is None:
        return None
    tree, src = parsed
    path, line = frames[0]
    parent = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}

    def ancestors(n):
        while n in parent:
            n = parent[n]
            yield n

    holder = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.For, ast.While,
                                                             ast.AsyncFor, ast.Try))
              and n.lineno <= line <= (n.end_lineno or n.lineno)]
    loops = [n for n in holder if isinstance(n, (ast.For, ast.While, ast.AsyncFor))]
    func = max((n for n in holder if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), key=lambda n: n.lineno,
               default=None)
    found = []
    for n in ast.walk(func or tree):
        kind = _EXITS.get(type(n))
        if kind is None or kind in without or n.lineno == line:
            continue
        up = list(ancestors(n))
        # after the call it skips the call only in later rounds of a loop around both, which `continue` does not end
        if n.lineno > line and (kind == "continue" or not any(a in loops for a in up)):
            continue
        if kind in ("continue", "break"):  # out of a loop the call is in
            scope = next((a for a in up if isinstance(a, (ast.For, ast.While, ast.AsyncFor))), None)
            ok, leaves = scope in loops, "the loop"
        else:  # return, raise: out of the function the call is in
            scope = next((a for a in up if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
            ok, leaves = scope is not None and scope is func, f"{func.name}()" if func is not None else ""
        cond = next((a for a in up if isinstance(a, ast.If)), None)
        if ok and cond is not None and up.index(cond) < up.index(scope):  # taken on some ranks only: an `if` in it
            test = " ".join((ast.get_source_segment(src, cond.test) or "").split())
            found.append({"stmt": kind, "site": f"{shown_path(path)}:{n.lineno}", "test": test,
                          "if_site": f"{shown_path(path)}:{cond.lineno}", "leaves": leaves, "line": n.lineno})
    tries = [n for n in holder if isinstance(n, ast.Try) and _span(n.body) and _span(n.body)[0] <= line
             <= _span(n.body)[1]]
    for t in sorted(tries, key=lambda n: -n.lineno)[:1]:
        for h in t.handlers:
            if not any(isinstance(x, ast.Raise) for x in ast.walk(h)):
                caught = ast.get_source_segment(src, h.type) if h.type is not None else "BaseException"
                found.append({"stmt": "except", "site": f"{shown_path(path)}:{h.lineno}", "test": caught,
                              "if_site": f"{shown_path(path)}:{t.lineno}", "leaves": "the try block",
                              "line": h.lineno})
                break
    if not found:  # no statement that leaves: the call may sit in an `if` some ranks do not enter
        around = max((n for n in ast.walk(func or tree) if isinstance(n, ast.If) and _span(n.body)
                      and _span(n.body)[0] <= line <= _span(n.body)[1]), key=lambda n: n.lineno, default=None)
        if around is None:
            return None
        test = " ".join((ast.get_source_segment(src, around.test) or "").split())
        return {"stmt": "if", "site": f"{shown_path(path)}:{around.lineno}", "test": test,
                "if_site": f"{shown_path(path)}:{around.lineno}", "leaves": "the call's `if`"}
    best = max(found, key=lambda e: (e["stmt"] == "except", e["line"] < line, -abs(e["line"] - line)))
    best.pop("line")
    return best


def exit_words(e: dict) -> str:
    """'`continue` at train.py:42 (under `if not torch.isfinite(loss):` at train.py:41) leaves the loop'."""
    if e["stmt"] == "if":
        return f"`if {e['test']}:` at {e['site']} is around it"
    if e["stmt"] == "except":
        return (f"An exception raised in the `try:` at {e['if_site']} and caught by `except {e['test']}:` at "
                f"{e['site']} leaves the try block")
    return f"`{e['stmt']}` at {e['site']} (under `if {e['test']}:` at {e['if_site']}) leaves {e['leaves']}"
