"""What each process's own seed decides, read from the source: the order a set of strings iterates in, and the
value of the built-in `hash()` of a string, both follow the process's string-hash seed, and every one of torchrun's
workers draws its own (the sandbox's ranks are dealt among zygotes with seeds of their own: `sandbox.defaults`).
`hash_order` says whether a call's order, or a value it takes, came from one; `registration_order` whether a
module's parameters or buffers were registered in one. No torch; the sources are parsed once (`sandbox.branches`).
"""
from __future__ import annotations

import ast
import builtins

from sandbox import _paths
from sandbox.branches import parsed_source, site_frame
from sandbox.words import shown_path

_ORDER_KEEPING = {"list", "tuple", "iter", "enumerate"}  # wrappers that keep the order of what they are given
_SET_METHODS = {"union", "intersection", "difference", "symmetric_difference", "copy"}
_BUILTINS = set(dir(builtins))  # sorted, len, min, ...: what they give back has no order of the set


def _set_made(node, assigned: dict, depth: int = 0, name: str | None = None):
    """Where the order of what `node` iterates comes from a set: (the expression that makes the set, the name it
    goes by there or None), or None. A set display or comprehension, set()/frozenset(), a set operation; through
    list()/tuple()/iter()/enumerate(), which keep its order (sorted() does not), a function of ours given it (buckets
    built from it), a comprehension over it, or a name (or attribute) assigned any of these in the same file."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _ORDER_KEEPING \
            and node.args:
        node = node.args[0]
    if isinstance(node, ast.Set):  # a display of constants other than strings iterates alike in every process
        consts = [e for e in node.elts if isinstance(e, ast.Constant)]
        strings = len(consts) < len(node.elts) or any(isinstance(e.value, (str, bytes)) for e in consts)
        return (node, name) if strings else None
    if isinstance(node, ast.SetComp) or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                                         and node.func.id in ("set", "frozenset")):
        return node, name
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitOr, ast.BitAnd, ast.Sub, ast.BitXor)):
        made = _set_made(node.left, assigned, depth) or _set_made(node.right, assigned, depth)
        return (node, name) if made is not None else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _SET_METHODS:
        return (node, name) if _set_made(node.func.value, assigned, depth) else None
    if depth >= 3:
        return None
    if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _BUILTINS):
        # a list (buckets, shards) built by a function of the program's from a set: in the set's order
        return next((m for a in node.args if (m := _set_made(a, assigned, depth + 1)) is not None), None)
    if isinstance(node, (ast.DictComp, ast.ListComp, ast.GeneratorExp)):
        # built while iterating a set: `{layer: i % world for i, layer in enumerate(layers)}`
        return next((m for g in node.generators if (m := _set_made(g.iter, assigned, depth + 1)) is not None), None)
    if isinstance(node, (ast.Name, ast.Attribute)):
        for value in assigned.get(ast.unparse(node), ()):
            made = _set_made(value, assigned, depth + 1, ast.unparse(node))
            if made is not None:
                return made
    return None


def _hash_made(node, assigned: dict, funcs: dict, depth: int = 0):
    """The built-in `hash()` of something not constant (a string's is seeded per process) that made the value of
    `node`: in the expression itself, in what a name of it was assigned in this file, or in the body of a function
    of this file it calls (`owner_of(name)`, `assign_buckets(model)`); the `hash(...)` call node, or None."""
    for x in ast.walk(node):
        if isinstance(x, ast.Call) and isinstance(x.func, ast.Name) and x.func.id == "hash" and x.args \
                and not isinstance(x.args[0], ast.Constant):
            return x
    if depth >= 3:
        return None
    for x in ast.walk(node):
        if isinstance(x, ast.Call) and isinstance(x.func, ast.Name) and x.func.id in funcs:
            found = _hash_made(funcs[x.func.id], {}, {}, 3)
            if found is not None:
                return found
        if isinstance(x, (ast.Name, ast.Attribute)) and not isinstance(getattr(x, "ctx", None), ast.Store):
            for value in assigned.get(ast.unparse(x), ()):
                if value is not node:
                    found = _hash_made(value, assigned, funcs, depth + 1)
                    if found is not None:
                        return found
    return None


def registration_order(path: str) -> dict | None:
    """A `register_buffer` / `register_parameter` / `add_module` / `register_module` call of this file made in a
    loop over a set (`hash_order` at its line): the order a module's parameters or buffers get depends on the
    process's string-hash seed. hash_order's dict, or None."""
    parsed = parsed_source(_paths.resolve(path))
    if parsed is None:
        return None
    for n in sorted(ast.walk(parsed[0]), key=lambda n: getattr(n, "lineno", 0)):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in (
                "register_buffer", "register_parameter", "add_module", "register_module"):
            found = hash_order(f"{path}:{n.lineno}")
            if found is not None and "loop" in found and "set" in found:
                return found
    return None


def hash_order(site: str | None) -> dict | None:
    """The loop around the call at `site` iterates a set (`_set_made`): its order follows the process's string-hash
    seed when the set holds strings, and separate processes (torchrun's workers) each draw their own, so the ranks
    make the loop's calls in different orders. {"loop": site of the `for`, "iter": its iterable as written,
    "made": site of the expression that made the set}; else, when an argument of the call holds a value made while
    iterating a set, {"value", "iter", "set", "made"}, or made by the built-in `hash()` of something that is not a
    constant (seeded alike for strings), {"value", "hash", "made"}; None if none of these."""
    frames = site_frame(site)
    parsed = parsed_source(frames[0][0]) if frames else None
    if parsed is None:
        return None
    tree, _ = parsed
    path, line = frames[0]
    assigned: dict[str, list] = {}
    for n in ast.walk(tree):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) and n.value \
            else []
        for t in targets:
            if isinstance(t, (ast.Name, ast.Attribute)):
                assigned.setdefault(ast.unparse(t), []).append(n.value)
        if isinstance(n, (ast.For, ast.AsyncFor)) and isinstance(n.target, ast.Name) \
                and isinstance(n.iter, (ast.Tuple, ast.List)):  # `for names in (decay, no_decay):` takes each
            assigned.setdefault(n.target.id, []).extend(n.iter.elts)
    loops = []
    for n in ast.walk(tree):
        if isinstance(n, (ast.For, ast.AsyncFor)) and n.body and n.body[0].lineno <= line <= (n.end_lineno or 0):
            loops.append((n.lineno, n.iter))
        elif isinstance(n, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)) \
                and n.lineno <= line <= (n.end_lineno or n.lineno):
            loops += [(n.lineno, g.iter) for g in n.generators]
    funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for at, it in sorted(loops, key=lambda x: -x[0]):  # the innermost first
        made = _set_made(it, assigned)
        if made is not None:
            return {"loop": f"{shown_path(path)}:{at}", "iter": ast.unparse(it), "set": made[1] or ast.unparse(it),
                    "made": f"{shown_path(path)}:{made[0].lineno}"}
        hashed = _hash_made(it, assigned, funcs)
        if hashed is not None:  # what the loop walks was laid out by a string's hash (buckets[hash(name) % n])
            return {"loop": f"{shown_path(path)}:{at}", "iter": ast.unparse(it), "hash": ast.unparse(hashed),
                    "made": f"{shown_path(path)}:{hashed.lineno}"}
    # not in such a loop: an argument of the call holds a value made from a set's order (an owner rank, a src)
    call = next((n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or 0)
                 and isinstance(n.func, ast.Attribute)), None)
    for arg in ([*call.args, *(k.value for k in call.keywords)] if call is not None else ()):
        for name in {ast.unparse(x) for x in ast.walk(arg) if isinstance(x, (ast.Name, ast.Attribute))}:
            for value in assigned.get(name, ()):
                made = _set_made(value, assigned) if isinstance(value, (ast.DictComp, ast.ListComp)) else None
                if made is not None:
                    return {"value": name, "iter": ast.unparse(value.generators[0].iter),
                            "set": made[1] or ast.unparse(made[0]), "made": f"{shown_path(path)}:{value.lineno}"}
                hashed = _hash_made(value, assigned, funcs)
                if hashed is not None:  # `owner = {n: hash(n) % world ...}`: the built-in hash of a string is seeded
                    return {"value": name, "hash": ast.unparse(hashed), "made": f"{shown_path(path)}:{value.lineno}",
                            "hash_at": f"{shown_path(path)}:{hashed.lineno}"}
    return None
