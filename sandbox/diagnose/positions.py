"""What a container the program filled holds on each rank, read from the source: its order, and how many items.

A collective that pairs tensors by position needs one order on every rank. An all_reduce adds its inputs element by
element, and a broadcast writes the root's tensor over the others' place by place: a tensor stacked from a dict's
values (or a list's items) holds them in the order the rank filled the dict, and a dict filled while walking the
rank's own share of the data (`for i in range(rank, n, world)`, `for batch in loader` over a DistributedSampler)
gets its keys in the order that share met them. Each rank's row 0 is then a different key, and the sum adds unlike
things: nothing fails, the numbers are wrong (after pytorch-lightning issue 20946: per-class metrics synced by
stacking `dict.values()`). A loop of collectives over such a container pairs different keys' calls the same way.

`data_order(site, op)` follows the call's tensor argument back through the assignments that reach it
(`origins.reaching`) to a container iterated in it (`d.values()`, `d.items()`, `list(d)`, a comprehension or a
loop over it), and says whether that container is filled in a loop over a value read from the rank
(`origins.source_of`), or over another container ordered so, with the filled key or item read in that loop; or
sorted by a key that reads the rank's own values. `sorted(...)` of the items themselves (a fixed order) and a
reduction (`sum`, `.mean()`, `len`) end the search: what they give back has no order of the container.

`loop_filled` says the other thing a container can differ in, on a failed run: how many items it holds, when an
`if` on the rank's data decided which ones a rank added (the loop over it then runs a different number of rounds).
Parsing only: no torch.
"""
from __future__ import annotations

import ast

from sandbox import branches
from sandbox.diagnose import origins
from sandbox.words import shown_path

# collectives that combine or replace their tensors place by place across ranks
BY_POSITION = {"all_reduce", "reduce", "broadcast", "reduce_scatter", "reduce_scatter_tensor", "all_reduce_coalesced"}
_ITERATE = {"values", "keys", "items"}
_FILL = {"append", "extend", "insert", "setdefault", "update", "add"}
_NEW = {"dict", "list", "OrderedDict", "defaultdict"}
_NO_ORDER = {"sorted", "sum", "len", "min", "max", "mean", "norm", "item", "numel", "count", "any", "all", "prod",
             "amax", "amin", "nansum", "logsumexp"}
_DEPTH = 8


def data_order(site: str | None, op: str) -> dict | None:
    """{"container", "iterated" (as written, and "at"), "fill" (as written, and "filled"), "by" ("for", "if" or
    "sorted"), "control" (its iterable, test or key, and "site"), "loop" (the site of the loop the call stands in,
    where that is how the order reached it)} for the call to `op` at `site`, or None. Any call in a loop that walks
    such a container pairs different items across ranks; a call that combines tensors by position
    (`BY_POSITION`) also where its tensor was laid out from one."""
    frames = branches.site_frame(site)
    parsed = branches.parsed_source(frames[0][0]) if frames else None
    if parsed is None:
        return None
    tree, _ = parsed
    path, line = frames[0]
    shown = shown_path(path)
    loops = sorted((n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.AsyncFor)) and n.body
                    and n.body[0].lineno <= line <= (n.end_lineno or n.lineno)), key=lambda n: -n.lineno)
    todo = [(loop.iter, loop) for loop in loops]
    call = next((n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or 0)
                 and origins.callee(n.func) == op), None)
    if op in BY_POSITION and call is not None and (call.args or call.keywords):
        todo.append((call.args[0] if call.args else call.keywords[0].value, None))
    for e, loop in todo:
        found = _ordered(tree, e, 0)
        if found is not None:
            return {**_shown(found, shown), **({"loop": f"{shown}:{loop.lineno}"} if loop is not None else {})}
    return None


def _shown(found: dict, shown: str) -> dict:
    """The lines of `found` (and of what it came through) as path:line."""
    return {k: (f"{shown}:{v}" if k in ("at", "filled", "site") else _shown(v, shown) if k == "through" else v)
            for k, v in found.items()}


def _ordered(tree: ast.AST, e: ast.AST, depth: int) -> dict | None:
    """The first container (or sort) whose order `e` keeps and that each rank orders its own way."""
    for kind, name, use in _iterated(tree, e, depth, set()):
        if kind == "sorted":
            return {"container": ast.unparse(use.args[0]), "iterated": ast.unparse(use), "at": use.lineno,
                    "fill": ast.unparse(use), "filled": use.lineno, "by": "sorted", "control": name,
                    "site": use.lineno}
        filled = _rank_filled(tree, name, use, depth)
        if filled is not None:
            return {"container": name, "iterated": ast.unparse(use), "at": use.lineno, **filled}
    return None



def _iterated(tree: ast.AST, e: ast.AST, depth: int, seen: set) -> list[tuple[str, str, ast.AST]]:
    """("container", its name, the expression that iterates it) for each container whose order `e`'s value keeps,
    and ("sorted", the key as written, the call) for a sort by a key that reads the rank's own values."""
    if depth > _DEPTH or id(e) in seen:
        return []
    seen.add(id(e))
    if isinstance(e, ast.Call):
        name = origins.callee(e.func)
        if name == "sorted":
            key = next((k.value for k in e.keywords if k.arg == "key"), None)
            return [("sorted", ast.unparse(key), e)] if key is not None and "rank" in origins.source_of(tree, key) \
                else []
        if name in _NO_ORDER:
            return []
        if name in _ITERATE and isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name):
            return [("container", e.func.value.id, e)]
        parts = [*e.args, *(k.value for k in e.keywords)]
        if isinstance(e.func, ast.Attribute):
            parts.append(e.func.value)  # a method of a value keeps its order (torch.stack(rows).float())
        return [x for p in parts for x in _iterated(tree, p, depth + 1, seen)]
    if isinstance(e, ast.Subscript):  # d[k]: a lookup by key has no order; what picks the key may
        return _iterated(tree, e.slice, depth + 1, seen)
    if isinstance(e, (ast.Compare, ast.BoolOp)) or (isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not)):
        return []  # a truth value (`if losses`, `len(x) > 0`): none of the order reaches it
    if isinstance(e, ast.IfExp):  # the test only picks which of the two values is taken
        return _iterated(tree, e.body, depth + 1, seen) + _iterated(tree, e.orelse, depth + 1, seen)
    if isinstance(e, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
        out = []
        for g in e.generators:
            it = g.iter
            out += [("container", it.id, it)] if isinstance(it, ast.Name) and _is_container(tree, it) else \
                _iterated(tree, it, depth + 1, seen)
        return out
    if isinstance(e, ast.Name):
        out = [("container", e.id, e)] if _is_container(tree, e) else []
        for node, value, kind in origins.reaching(tree, e.id, e):
            value = origins.unpacked(node, e.id) if kind == "set" and _is_tuple_assign(node) else value
            if value is not None and kind in ("set", "iter"):
                if kind == "iter" and isinstance(value, ast.Name) and _is_container(tree, value):
                    out.append(("container", value.id, value))  # for k in d: the loop walks d's order
                else:
                    out += _iterated(tree, value, depth + 1, seen)
        return out
    return [x for c in ast.iter_child_nodes(e) if isinstance(c, ast.expr)
            for x in _iterated(tree, c, depth + 1, seen)]


def _is_tuple_assign(node: ast.AST) -> bool:
    return isinstance(node, ast.Assign) and any(isinstance(t, (ast.Tuple, ast.List)) for t in node.targets)



def _is_container(tree: ast.AST, e: ast.Name) -> bool:
    """Is this name, where it is used, a dict or list the program made empty and fills itself?"""
    return any(kind == "set" and _new(origins.unpacked(node, e.id) if _is_tuple_assign(node) else value)
               for node, value, kind in origins.reaching(tree, e.id, e))


def _new(v: ast.AST | None) -> bool:
    if isinstance(v, (ast.Dict, ast.List)):
        return not v.keys if isinstance(v, ast.Dict) else not v.elts
    return isinstance(v, ast.Call) and origins.callee(v.func) in _NEW and not v.args[1:] and \
        (not v.args or origins.callee(v.func) == "defaultdict")


def _fills(scope: ast.AST, name: str):
    """(statement or call, the expression that picks the place) for each place the scope adds to `name`:
    `name[k] = v`, `name.append(v)` (or extend, insert, setdefault, update, add, wherever the call stands),
    `name += [v]`."""
    for n in ast.walk(scope):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _FILL \
                and isinstance(n.func.value, ast.Name) and n.func.value.id == name and n.args:
            yield n, n.args[0]
        elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id == name:
            yield n, n.value
        elif isinstance(n, (ast.Assign, ast.AugAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name:
                    yield n, t.slice


def _rank_filled(tree: ast.AST, name: str, use: ast.AST, depth: int) -> dict | None:
    """The first place, before `use`, that fills `name` in an order of the rank's own: inside a loop over a value
    read from the rank, or over a container ordered so, with the key or item read in that loop. (An `if` that reads
    the rank decides which keys a rank has, not their order: `loop_filled` says that of a failed run.)"""
    made = [node for node, value, kind in origins.reaching(tree, name, use)
            if kind == "set" and _new(origins.unpacked(node, name) if _is_tuple_assign(node) else value)]
    if not made or depth > 3:
        return None
    parents = origins.parent_map(tree)
    scope = origins.scope_of(tree, made[0])
    for fill, key in sorted(_fills(scope, name), key=lambda f: f[0].lineno):
        if fill.lineno >= use.lineno:
            continue
        said = {"fill": ast.unparse(fill).split("\n")[0], "filled": fill.lineno}
        up = parents.get(fill)
        while up is not None and up is not scope:
            if isinstance(up, (ast.For, ast.AsyncFor)) and _reads_loop(up, key):
                if "rank" in origins.source_of(tree, up.iter):
                    return {**said, "by": "for", "control": ast.unparse(up.iter), "site": up.lineno}
                through = _ordered(tree, up.iter, depth + 1)
                if through is not None:  # filled while walking a container each rank ordered its own way
                    return {**said, "by": "for", "control": ast.unparse(up.iter), "site": up.lineno,
                            "through": through}
            up = parents.get(up)
    return None


def _reads_loop(loop: ast.AST, key: ast.AST) -> bool:
    """Does the key (or item) read the loop's variable, or a name the loop's body assigns?"""
    bound = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    for n in ast.walk(loop):
        if isinstance(n, ast.Assign) and n is not loop:
            bound |= {t.id for tt in n.targets for t in ast.walk(tt) if isinstance(t, ast.Name)}
    return any(isinstance(n, ast.Name) and n.id in bound for n in ast.walk(key))


# ------------------------------------------------------------------ a container whose rounds differ between ranks

def loop_filled(tree: ast.AST, path: str, line: int) -> dict | None:
    """The loop around `line` runs once per item of a container (`for k, v in metrics.items()`) that an `if` with a
    condition that can differ between ranks fills, earlier in the same function (`if draw: metrics["x"] = ...`):
    so the loop, and the calls in it, run a different number of times on different ranks. data_branch's dict for
    the first such `if`, with "loop" (its site), "container", "filled" (the site of the statement that adds to it),
    and "fills": every such `if` and statement (which of them came out differently is the run's to say)."""
    loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.AsyncFor)) and n.body
             and n.body[0].lineno <= line <= (n.end_lineno or n.lineno)]
    for loop in sorted(loops, key=lambda n: -n.lineno):
        it = loop.iter
        while isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in ("enumerate", "list",
                                                                                           "sorted", "reversed") \
                and it.args:
            it = it.args[0]
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("items", "keys",
                                                                                               "values"):
            it = it.func.value
        if not isinstance(it, ast.Name):
            continue
        scope = origins.scope_of(tree, loop)
        parents = origins.parent_map(tree)
        fills = []
        for n, _ in sorted(_fills(scope, it.id), key=lambda f: f[0].lineno):
            if n.lineno >= loop.lineno:
                continue
            up = parents.get(n)
            while up is not None and up is not scope and not isinstance(up, ast.If):
                up = parents.get(up)
            found = origins.varying(tree, up) if isinstance(up, ast.If) else None
            if found:
                fills.append((up, n, found))
        if fills:
            up, n, found = fills[0]
            taken = "if" if any(n is b or n in ast.walk(b) for b in up.body) else "else"
            sources = set().union(*(f for _, _, got in fills for f in got.values()))
            return {"test": " ".join(ast.unparse(up.test).split()), "site": f"{shown_path(path)}:{up.lineno}",
                    "taken": taken, "reads": list(dict.fromkeys(r for _, _, got in fills for r in got)),
                    "source": "data" if sources & {"data", "random"} else "rank",
                    **({"random": True} if "random" in sources else {}),
                    "loop": f"{shown_path(path)}:{loop.lineno}", "container": it.id,
                    "filled": f"{shown_path(path)}:{n.lineno}",
                    "fills": [{"test": " ".join(ast.unparse(u.test).split()), "site": f"{shown_path(path)}:{u.lineno}",
                               "filled": f"{shown_path(path)}:{m.lineno}"} for u, m, _ in fills]}
    return None


def filled_words(b: dict) -> str:
    """'`metrics` gets an item at job.py:6 under `if draw < p:` at job.py:5' (and each further such `if`)."""
    return "; ".join(f"`{b['container']}` gets an item at {f['filled']} under `if {f['test']}:` at {f['site']}"
                     for f in b.get("fills") or [b])


def loop_branch(frames: list[tuple[str, int]]) -> dict | None:
    """`loop_filled` for the first of these frames (innermost first) that has such a loop."""
    for path, line in frames:
        parsed = branches.parsed_source(path)
        if parsed is not None:
            found = loop_filled(parsed[0], path, line)
            if found is not None:
                return found
    return None
