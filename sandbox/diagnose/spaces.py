"""Which numbering a rank number is in, read from the source: a rank of the world (a global rank) or a rank within a
process group. torch.distributed takes `src` and `dst` as global ranks and `group_src` and `group_dst` as ranks within
the group passed with them; `dist.get_rank()`, `dist.get_process_group_ranks(g)`, `dist.get_global_rank(g, i)` and
the RANK variable give global ranks, `dist.get_rank(g)`, `dist.get_group_rank(g, r)` and `g.rank()` ranks within a
group. A number of one kind passed where torch reads the other is legal wherever it is small enough, and then names
another process: `group_src=1` of the group [1, 3] is global rank 3.

`root_space(site, op, arg)` says which kind the value a call passed as `arg` was made as: it follows the argument's
names back through the assignments that reach it (`origins.reaching`), and a function's parameters into the calls
of that function in the same file. It claims a kind only where every way the value can come holds that kind alone
(constants aside); a value of unknown make (an attribute, a function the source does not open) claims nothing.
Parsing only: no torch.
"""
from __future__ import annotations

import ast

from sandbox import branches
from sandbox.diagnose import origins
from sandbox.words import shown_path

GLOBAL, GROUP = "global", "group"
_GLOBAL_CALLS = {"get_process_group_ranks", "get_global_rank"}
_GROUP_CALLS = {"get_group_rank"}
_KEEP = {"int", "min", "max", "sorted", "list", "tuple", "abs", "next", "iter", "reversed"}  # a rank in, a rank out
_DEPTH = 8


def root_space(site: str | None, op: str, arg: str) -> dict | None:
    """{"space": "global" | "group", "value": the argument as written, "group": the group as written, "made": where
    it took that kind (the site of the call that gave it), "how": that call as written, "compared": whether the
    kind was read from a comparison, "at": the call's site}, for the call to `op` at `site` that passes `arg` (by
    name, or in torch's position for it); for op "P2POp", every P2POp that the function of the batch_isend_irecv
    at `site` makes, all of one kind. None where the source does not show one kind."""
    frames = branches.site_frame(site)
    parsed = branches.parsed_source(frames[0][0]) if frames else None
    if parsed is None:
        return None
    tree, _ = parsed
    path, line = frames[0]
    calls = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and c.lineno <= line <= (c.end_lineno or c.lineno)]
    if op == "P2POp" and calls:  # the ops the batch_isend_irecv at this line was given: those its function makes
        calls = [c for c in ast.walk(origins.scope_of(tree, calls[0])) if isinstance(c, ast.Call)]
    pos = 2 if op.startswith(("gather", "scatter", "P2P")) else 1  # (tensor, [list,] src/dst) and (op, tensor, peer)
    out = []
    for call in (c for c in calls if origins.callee(c.func) == op):
        e = next((k.value for k in call.keywords if k.arg == arg), None)
        if e is None and not arg.startswith("group_") and len(call.args) > pos:
            e = call.args[pos]
        found: dict = {}
        kinds = _space(tree, e, found, 0) - {"const"} if e is not None else set()
        if len(kinds) != 1 or not kinds <= {GLOBAL, GROUP}:
            return None
        kind = kinds.pop()
        made = found.get(kind)
        group = next((k.value for k in call.keywords if k.arg == "group"), None)
        out.append({"space": kind, "value": ast.unparse(e), "group": ast.unparse(group) if group else "group",
                    "made": f"{shown_path(path)}:{(made or call).lineno}", "how": ast.unparse(made or e),
                    "compared": isinstance(made, ast.Compare), "at": f"{shown_path(path)}:{call.lineno}"})
    return out[0] if out and len({f["space"] for f in out}) == 1 else None



def _a_size(e: ast.AST) -> bool:
    """A number of ranks: len(...), get_world_size(...), group.size(), or a name that says so (world, world_size)."""
    name = origins.callee(e.func) if isinstance(e, ast.Call) else origins.callee(e)
    return name in ("len", "size") or bool(origins.WORLD.search(name)) or name in ("world", "n_ranks", "nranks")


def _env_name(e: ast.AST) -> str | None:
    """"RANK" for os.environ["RANK"], os.environ.get("RANK"), os.getenv("RANK")."""
    key = None
    if isinstance(e, ast.Subscript) and ast.unparse(e.value).endswith("environ"):
        key = e.slice
    elif isinstance(e, ast.Call) and origins.callee(e.func) in ("get", "getenv") and e.args \
            and ("environ" in ast.unparse(e.func) or origins.callee(e.func) == "getenv"):
        key = e.args[0]
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


def _space(tree: ast.AST, e: ast.AST, found: dict, depth: int) -> set[str]:
    """The kinds a value can have: "global", "group", "const" (a number written in the source), "other" (a value
    that is not a rank, or of a make the source does not show). `found` gets, per kind, the node that gave it."""
    if depth > _DEPTH:
        return {"other"}
    env = _env_name(e)
    if env is not None:
        kind = GLOBAL if env == "RANK" else "other"
        found.setdefault(kind, e)
        return {kind}
    if isinstance(e, ast.Constant):
        return {"const"} if isinstance(e.value, int) else {"other"}
    if isinstance(e, ast.Call):
        name = origins.callee(e.func)
        if name == "get_rank":
            group = e.args[0] if e.args else next((k.value for k in e.keywords if k.arg == "group"), None)
            kind = GLOBAL if group is None or (isinstance(group, ast.Constant) and group.value is None) else GROUP
        elif name in _GLOBAL_CALLS:
            kind = GLOBAL
        elif name in _GROUP_CALLS or (name == "rank" and isinstance(e.func, ast.Attribute) and not e.args):
            kind = GROUP
        elif name in _KEEP and e.args:
            return set().union(*(_space(tree, a, found, depth + 1) for a in e.args))
        else:
            return {"other"}
        found.setdefault(kind, e)
        return {kind}
    if isinstance(e, ast.BinOp):  # rank + 1 is a rank of the same kind; rank % 2 and rank // tp are not ranks
        if isinstance(e.op, (ast.Add, ast.Sub)):
            return _space(tree, e.left, found, depth + 1) | _space(tree, e.right, found, depth + 1)
        if isinstance(e.op, ast.Mod) and _a_size(e.right):  # (pos + 2) % len(order): round a ring, the same kind
            return _space(tree, e.left, found, depth + 1)
        return {"other"}
    if isinstance(e, ast.Subscript):  # ranks[0]: an item of a list of ranks is of the list's kind
        return _space(tree, e.value, found, depth + 1) if not isinstance(e.slice, ast.Slice) else {"other"}
    if isinstance(e, (ast.ListComp, ast.GeneratorExp)):
        return _space(tree, e.elt, found, depth + 1)
    if isinstance(e, (ast.List, ast.Tuple)) and e.elts:
        return set().union(*(_space(tree, x, found, depth + 1) for x in e.elts))
    if isinstance(e, ast.IfExp):
        return _space(tree, e.body, found, depth + 1) | _space(tree, e.orelse, found, depth + 1)
    if isinstance(e, ast.Name):
        return _name(tree, e, found, depth)
    return {"other"}


def _name(tree: ast.AST, e: ast.Name, found: dict, depth: int) -> set[str]:
    reach = origins.reaching(tree, e.id, e)
    if not reach:
        return {"other"}
    out = _bound(tree, e, reach, found, depth)
    if out == {"const"}:  # a number written in the source: the program says which kind where it compares it
        told = _compared(tree, e.id, found, depth)
        return told or out
    return out


def _compared(tree: ast.AST, name: str, found: dict, depth: int) -> set[str]:
    """The kind of rank this name is compared with (`dist.get_rank(group) == AGG`), where every such comparison in
    the file says one kind; empty where none does."""
    kinds, at = set(), {}
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.Eq, ast.NotEq))):
            continue
        sides = [n.left, n.comparators[0]]
        for this, other in (sides, sides[::-1]):
            if isinstance(this, ast.Name) and this.id == name and not (isinstance(other, ast.Name)
                                                                       and other.id == name):
                got = _space(tree, other, at, depth + 1) & {GLOBAL, GROUP}
                kinds |= got
                for k in got:
                    at[k] = n
    if len(kinds) == 1:
        kind = next(iter(kinds))
        found.setdefault(kind, at[kind])
        return kinds
    return set()


def _bound(tree: ast.AST, e: ast.Name, reach: list, found: dict, depth: int) -> set[str]:
    out: set[str] = set()
    for node, value, kind in reach:
        if kind == "argument":
            out |= _passed(tree, node, e.id, found, depth + 1)
        elif kind in ("set", "iter") and value is not None:
            if kind == "set" and isinstance(node, ast.Assign) and not any(isinstance(t, ast.Name) and t.id == e.id
                                                                          for t in node.targets):
                value = origins.unpacked(node, e.id)  # rank, world = dist.get_rank(), dist.get_world_size()
            out |= _space(tree, value, found, depth + 1) if value is not None else {"other"}
        else:
            out.add("other")
    return out



def _passed(tree: ast.AST, func: ast.AST, param: str, found: dict, depth: int) -> set[str]:
    """The kinds of what the calls of `func` in this file pass as its parameter `param`."""
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return {"other"}
    names = [a.arg for a in func.args.posonlyargs + func.args.args]
    method = bool(names) and names[0] in ("self", "cls")
    out: set[str] = set()
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call) or origins.callee(call.func) != func.name:
            continue
        given = next((k.value for k in call.keywords if k.arg == param), None)
        if given is None and param in names:
            i = names.index(param) - (1 if method and isinstance(call.func, ast.Attribute) else 0)
            given = call.args[i] if 0 <= i < len(call.args) else None
        out |= _space(tree, given, found, depth + 1) if given is not None else {"other"}
    return out or {"other"}
