"""Which data-dependent `if` a call was reached through, and where the values its condition reads come from.

Ranks come to disagree about their calls through an `if` that came out one way on some ranks and the other way on
the rest. `branches.rank_branch` finds one whose condition names the rank (`if rank == 0:`); this finds one whose
condition reads a value the rank computed from its own data (`if sent_tokens == 0:`, where `sent_tokens` was read
from this rank's block), the usual wrong fix of a mismatch: syncing a value only on the ranks that need it. Or,
with no `if` around the call, the one that let some ranks out of a loop early (`if done: break`) while the others
are still in it: a polling loop whose exit reads unsynced metadata (`data_break`).

It claims only what the source shows. Each name the condition reads is traced back through the assignments that
reach the `if` in its function (then the module): a name that comes only from constants, the world size, imports,
or a value every rank received from an all_reduce, broadcast or all_gather is the same on every rank, so an `if`
that reads nothing else is never called data-dependent. Arguments of the function are not followed into its
callers, so a condition on them alone is not called data-dependent either: the source does not say where they came
from. Parsing only (the files through branches' cache): no torch, no imports of the user's code.
"""
from __future__ import annotations

import ast
import re

from sandbox import branches
from sandbox.calls import SYNCED
from sandbox.words import listed, shown_path

# calls whose result is the same on every rank of the world (the size, the backend), or a function of their
# arguments alone (builtins, torch's constructors and math): their result varies only where an argument does
WORLD = re.compile(r"(get_world_size|world_size|WORLD_SIZE|num_replicas|get_backend|is_initialized|is_available)$")
PURE = frozenset("int float bool str len abs min max round sum sorted tuple list dict set range any all divmod pow zip"
                 " enumerate reversed isinstance tensor as_tensor zeros ones full arange empty ceil floor sqrt log"
                 " log2 device dtype".split())
# collectives after which every rank holds the same value in the tensor (or list) passed first: `sandbox.calls`'s
SYNCS = SYNCED
# a draw from a random generator (Python's, NumPy's, torch's)
RANDOM = re.compile(r"(^|\.)(random|rand|randn|randint|randrange|randperm|choice|choices|sample|shuffle|uniform|"
                    r"normal|bernoulli|multinomial|poisson|binomial)$")
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.With, ast.AsyncWith, ast.Match)
ADVICE = ("A value that decides which collectives a rank calls must be the same on every rank: sync it first"
          " (every rank takes part in an all_reduce or broadcast of it), then branch on it.")
RANK_ADVICE = ("Every rank of a group must make its collectives: keep the call outside the rank's branch, and branch"
               " only around what this rank does with the result.")


def advice(b: dict) -> str:
    """What to do about a branch that sent the ranks different ways: sync the data it reads, or, for a value
    computed from the rank (which no sync makes equal), take the collective out of the branch."""
    return RANK_ADVICE if b.get("source") == "rank" else ADVICE
_DEPTH = 12  # how far back through assignments a name is followed (a chain longer than this is not claimed)
_parents: dict[int, dict[ast.AST, ast.AST]] = {}


def data_branch(frames: list[tuple[str, int]]) -> dict | None:
    """The innermost `if` around the call, looking from the innermost frame out, whose condition reads values that
    can differ between ranks: {"test", "site", "taken": "if" | "else", "reads": names, "source": "data" | "rank"};
    None if there is none ("rank": the names are computed from the rank, not read from data)."""
    for path, line in frames:
        parsed = branches.parsed_source(path)
        if parsed is None:
            continue
        tree, src = parsed
        around = []
        for node in ast.walk(tree):
            if isinstance(node, ast.If):
                for taken, body in (("if", node.body), ("else", node.orelse)):
                    if body and body[0].lineno <= line <= max(getattr(n, "end_lineno", n.lineno) for n in body):
                        around.append((node, taken))
        for node, taken in sorted(around, key=lambda nt: -nt[0].lineno):  # the innermost first
            found = varying(tree, node)
            if found:
                test = " ".join((ast.get_source_segment(src, node.test) or "").split())
                sources = set().union(*found.values())
                return {"test": test, "site": f"{shown_path(path)}:{node.lineno}", "taken": taken,
                        "reads": list(found), "source": "data" if sources & {"data", "random"} else "rank",
                        **({"random": True} if "random" in sources else {})}
    return None


def data_break(frames: list[tuple[str, int]], prev: list[tuple[str, int]]) -> dict | None:
    """The `if` that let this rank out of a loop early (`if done: break`) between its previous call (`prev`'s frame,
    inside the loop) and this one (after it), in one function, when its condition reads values that can differ
    between ranks: data_branch's dict with "taken": "break" and "loop": (path, first line, last line); else None.
    How ranks that left a polling loop came to a call the others, still polling, have not reached."""
    if not frames or not prev or prev[0][0] != frames[0][0] or not prev[0][1] < frames[0][1]:
        return None
    path, line = frames[0]
    parsed = branches.parsed_source(path)
    if parsed is None:
        return None
    tree, src = parsed
    before = prev[0][1]
    for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.If) and before < n.lineno
                        and n.end_lineno < line), key=lambda n: -n.lineno):  # the nearest the call first
        loop, scope = _broken_loop(tree, node), _scope(tree, node)
        if loop is None or not loop.lineno <= before <= loop.end_lineno or loop.end_lineno >= line:
            continue  # it leaves no loop, or not the one the previous call was made in and this one is after
        if scope is not tree and not scope.lineno <= line <= scope.end_lineno:
            continue  # another function than the one this call is made in
        found = varying(tree, node)
        if found:
            test = " ".join((ast.get_source_segment(src, node.test) or "").split())
            return {"test": test, "site": f"{shown_path(path)}:{node.lineno}", "taken": "break", "reads": list(found),
                    "source": "data" if "data" in set().union(*found.values()) else "rank",
                    "loop": (path, loop.lineno, loop.end_lineno)}
    return None


def _broken_loop(tree: ast.AST, node: ast.If) -> ast.AST | None:
    """The loop this `if` breaks out of, where its body or else holds a `break` of that loop; None if none."""
    parents = parent_map(tree)
    loop = parents.get(node)
    while loop is not None and not isinstance(loop, (ast.For, ast.AsyncFor, ast.While, *SCOPES)):
        loop = parents.get(loop)
    if loop is None or isinstance(loop, SCOPES):
        return None
    todo = list(node.body + node.orelse)
    while todo:  # a break inside a loop (or function) nested in the if is not this loop's
        n = todo.pop()
        if isinstance(n, ast.Break):
            return loop
        if not isinstance(n, (ast.For, ast.AsyncFor, ast.While, *SCOPES, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(n))
    return None


def varying(tree: ast.AST, node: ast.If) -> dict[str, set[str]]:
    """The names this `if`'s condition reads whose values can differ between ranks, in the order read, each with
    where it comes from ({"data"}, {"rank"} or both); empty when the condition comes out alike on every rank (or
    the source does not show otherwise). A draw from a random generator in the condition itself (`random.random()
    < p`) counts, as {"random"}: each rank's generator is its own (seeded per rank, or not at all)."""
    out: dict[str, set[str]] = {}
    for n in ast.walk(node.test):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in out:
            got = _name(tree, n.id, node, set(), 0) & {"data", "rank"}
            if got:
                out[n.id] = got
        elif isinstance(n, ast.Call) and RANDOM.search(ast.unparse(n.func)):
            out.setdefault(ast.unparse(n), {"random"})
    return dict(sorted(out.items(), key=lambda kv: _first_read(node.test, kv[0])))


def because(b: dict) -> str:
    """', whose condition reads sent_tokens, a value that differs between ranks (it was read from this rank's own
    data)': why a data-dependent `if` came out differently on different ranks."""
    names = b["reads"]
    where = ("drawn from this rank's own random generator" if b.get("random") else
             "read from this rank's own data" if b["source"] == "data" else "computed from the rank")
    if len(names) == 1:
        return f", whose condition reads {names[0]}, a value that differs between ranks (it was {where})"
    return f", whose condition reads {listed(names)}, values that can differ between ranks ({where})"


def _first_read(test: ast.AST, name: str) -> tuple[int, int]:
    return min(((n.lineno, n.col_offset) for n in ast.walk(test) if (isinstance(n, ast.Name) and n.id == name)
                or (isinstance(n, ast.Call) and ast.unparse(n) == name)), default=(0, 0))


def parent_map(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    if id(tree) not in _parents:  # the trees live in branches' cache for the whole process: ids stay theirs
        _parents[id(tree)] = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    return _parents[id(tree)]


def scope_of(tree: ast.AST, node: ast.AST) -> ast.AST:
    """The innermost function holding the node, or the module."""
    return _scope(tree, node)


def _scope(tree: ast.AST, node: ast.AST) -> ast.AST:
    """The innermost function holding the node, or the module."""
    parents = parent_map(tree)
    p = parents.get(node)
    while p is not None and not isinstance(p, SCOPES):
        p = parents.get(p)
    return p if p is not None else tree


def _compounds(tree: ast.AST, node: ast.AST, scope: ast.AST) -> set[ast.AST]:
    """The compound statements (if, loops, try, with) between a node and its scope."""
    parents, out = parent_map(tree), set()
    p = parents.get(node)
    while p is not None and p is not scope:
        if isinstance(p, COMPOUND):
            out.add(p)
        p = parents.get(p)
    return out


def _walk_scope(scope: ast.AST):
    """The nodes of one scope, not those of functions or classes defined in it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, (*SCOPES, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(n))


def _bindings(scope: ast.AST, name: str):
    """(node, value or None, kind) for each place the scope binds the name: "set" (it takes the value), "add" (an
    augmented assignment: it keeps what it had too), "iter" (a loop over the value), "synced" (every rank now
    holds the same: it was passed to an all_reduce, broadcast or all_gather), "import", "argument"."""
    for n in _walk_scope(scope):
        if isinstance(n, ast.Assign) and any(name in _targets(t) for t in n.targets):
            yield n, n.value, "set"
        elif isinstance(n, ast.AnnAssign) and n.value is not None and name in _targets(n.target):
            yield n, n.value, "set"
        elif isinstance(n, ast.NamedExpr) and n.target.id == name:
            yield n, n.value, "set"
        elif isinstance(n, ast.AugAssign) and name in _targets(n.target):
            yield n, n.value, "add"
        elif isinstance(n, (ast.For, ast.AsyncFor)) and name in _targets(n.target):
            yield n, n.iter, "iter"
        elif isinstance(n, ast.withitem) and n.optional_vars is not None and name in _targets(n.optional_vars):
            yield n.context_expr, n.context_expr, "set"
        elif isinstance(n, (ast.Import, ast.ImportFrom)) and any(
                (a.asname or a.name.split(".")[0]) == name for a in n.names):
            yield n, None, "import"
        elif isinstance(n, (*SCOPES, ast.ClassDef)) and getattr(n, "name", None) == name:
            yield n, None, "import"  # a function or class defined here: the same code on every rank
        elif (isinstance(n, ast.Call) and callee(n.func) in SYNCS and n.args
              and isinstance(n.args[0], ast.Name) and n.args[0].id == name):
            yield n, None, "synced"
    if isinstance(scope, SCOPES):
        a = scope.args
        if any(x.arg == name for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if x is not None):
            yield scope, None, "argument"


def _targets(t: ast.AST) -> set[str]:
    if isinstance(t, ast.Name):
        return {t.id}
    if isinstance(t, (ast.Tuple, ast.List)):
        return set().union(*(_targets(e) for e in t.elts)) if t.elts else set()
    if isinstance(t, ast.Starred):
        return _targets(t.value)
    return set()  # an attribute or an item set (x.a = ..., x[i] = ...): not a new value of a name


def unpacked(node: ast.AST, name: str) -> ast.AST | None:
    """The item of a tuple assigned to a tuple of names that goes to `name` (`rank, world = dist.get_rank(),
    dist.get_world_size()`); None where the assignment is not of that shape."""
    for t in getattr(node, "targets", ()):
        if isinstance(t, (ast.Tuple, ast.List)) and isinstance(node.value, (ast.Tuple, ast.List)) \
                and len(t.elts) == len(node.value.elts):
            for target, item in zip(t.elts, node.value.elts):
                if isinstance(target, ast.Name) and target.id == name:
                    return item
    return None


def callee(f: ast.AST) -> str:
    """The name a call is made by: `all_reduce` of `dist.all_reduce(...)`, `f` of `f(...)`; "" for anything else."""
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _name(tree: ast.AST, name: str, use: ast.AST, seen: set, depth: int) -> set[str]:
    """Where a name's value at this use comes from: a set of "const", "rank", "data", "argument"."""
    if branches.RANKISH.fullmatch(name):
        return {"rank"}
    if depth > _DEPTH or (name, id(use)) in seen:
        return set()  # a loop of assignments, or a chain too long to follow: claim nothing from it
    seen = seen | {(name, id(use))}
    reach = reaching(tree, name, use)
    out: set[str] = set()
    for node, value, kind in reach:
        if kind in ("import", "synced"):
            out.add("const")
        elif kind == "argument":
            out.add("argument")
        elif value is not None:
            out |= _expr(tree, value, seen, depth + 1)
    return out or {"const"}  # a builtin, or a name the source never binds: nothing says it varies


def reaching(tree: ast.AST, name: str, use: ast.AST) -> list:
    """The bindings of a name that can reach this use of it, looking out from its function to the enclosing ones
    and the module: [(node, value or None, kind), ...] as `_bindings` gives them ([] where the source never binds
    it: a builtin)."""
    scope = _scope(tree, use)
    while True:  # not bound in this function: the enclosing one's, or the module's
        reach = _reaching(tree, scope, name, use)
        if reach or scope is tree:
            return reach
        scope = _scope(tree, scope)


def _reaching(tree: ast.AST, scope: ast.AST, name: str, use: ast.AST) -> list:
    """The bindings of a name in a scope that can reach the use: those before it, less those that a later one on
    the straight path to the use replaces (one not inside an if, loop or try that the use is not inside too)."""
    around_use = _compounds(tree, use, scope)
    out = []
    found = sorted(_bindings(scope, name), key=lambda b: (getattr(b[0], "lineno", 0), getattr(b[0], "col_offset", 0)))
    for node, value, kind in found:
        if kind != "argument" and getattr(node, "lineno", 0) >= use.lineno and _scope(tree, use) is scope:
            continue  # after the use (a loop may carry it round, but the first pass reads what came before)
        straight = kind not in ("add", "iter") and _compounds(tree, node, scope) <= around_use
        out = [(node, value, kind)] if straight else out + [(node, value, kind)]
    return out


def source_of(tree: ast.AST, e: ast.AST) -> set[str]:
    """Where an expression's value comes from: "const", "rank", "data", "argument" (`_expr`)."""
    return _expr(tree, e, set(), 0)


def _expr(tree: ast.AST, e: ast.AST, seen: set, depth: int) -> set[str]:
    """Where an expression's value comes from: "data" for anything read or computed by a call the source cannot
    see into, "rank" for the rank, "const" for constants and the world size, and what its names bring."""
    if isinstance(e, ast.Constant):  # os.environ["LOCAL_RANK"] is the rank; other constants are the same everywhere
        return {"rank"} if isinstance(e.value, str) and branches.RANKISH.fullmatch(e.value) else {"const"}
    if isinstance(e, ast.Name):
        return _name(tree, e.id, e, seen, depth)
    if isinstance(e, (ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
        bound = set().union(*(_targets(g.target) for g in e.generators))
        out = set().union(*(_expr(tree, g.iter, seen, depth) for g in e.generators))
        parts = [e.key, e.value] if isinstance(e, ast.DictComp) else [e.elt]
        for p in parts:  # what the element adds besides the loop variables (whose values are the iterables')
            out = out.union(*(_name(tree, n.id, n, seen, depth) for n in ast.walk(p)
                              if isinstance(n, ast.Name) and n.id not in bound))
        return out
    if isinstance(e, ast.Call):
        name = callee(e.func)
        if WORLD.search(name):
            return {"const"}
        if branches.RANKISH.fullmatch(name):
            return {"rank"}
        if name == "getenv":
            return {"data"}  # this process's environment
        args = set().union(set(), *(_expr(tree, a, seen, depth) for a in e.args + [k.value for k in e.keywords]))
        if isinstance(e.func, ast.Attribute) and not _is_module(tree, e.func.value):
            return args | _expr(tree, e.func.value, seen, depth)  # a method of a value (x.item()): computed from it
        return (args or {"const"}) if name in PURE else args | {"data"}  # a function the source does not open
    if isinstance(e, ast.Subscript):
        return _expr(tree, e.value, seen, depth) | _expr(tree, e.slice, seen, depth)
    if isinstance(e, ast.Attribute):
        return {"data"} if e.attr == "environ" else _expr(tree, e.value, seen, depth)
    return set().union({"const"}, *(_expr(tree, c, seen, depth) for c in ast.iter_child_nodes(e)
                                    if isinstance(c, ast.expr)))


def _is_module(tree: ast.AST, e: ast.AST) -> bool:
    """Is this an imported name (torch, math, dist: imported anywhere in the file), whose functions the source
    does not open?"""
    root = e
    while isinstance(root, ast.Attribute):
        root = root.value
    return isinstance(root, ast.Name) and any(
        isinstance(n, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name.split(".")[0]) == root.id
                                                           for a in n.names) for n in ast.walk(tree))
