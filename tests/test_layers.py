"""The package's layering, read from the source with `ast` (nothing is imported): no import cycle among sandbox's
modules, counting imports inside functions too, and no module reaching for another's private names."""
import ast
import os

import sandbox

PKG = os.path.dirname(sandbox.__file__)


def _modules() -> dict[str, str]:
    out = {}
    for root, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(root, f), os.path.dirname(PKG))[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = os.path.join(root, f)
    return out


MODULES = _modules()


def _imports(path: str):
    """(module imported, names taken from it, line) for every import of sandbox's own modules in a file."""
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("sandbox."):
                    yield a.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and (
                node.module == "sandbox" or node.module.startswith("sandbox.")):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                if sub in MODULES:  # `from sandbox import words`: the submodule
                    yield sub, [], node.lineno
                else:
                    yield node.module, [a.name], node.lineno


def _graph() -> dict[str, set[str]]:
    g = {}
    for mod, path in MODULES.items():
        g[mod] = {dep for dep, _, _ in _imports(path) if dep in MODULES and dep != "sandbox" and dep != mod}
    return g


def _cycle(g):
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in sorted(g.get(m, ())):
            if state.get(d) == "open":
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[m] = "done"
        return None

    for m in sorted(g):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_no_import_cycle():
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()))


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_trace_reader_and_the_judge_do_not_import_torch():
    g = _graph()
    torch_free = ["sandbox.events", "sandbox.words", "sandbox.result", "sandbox.diagnose", "sandbox.policy",
                  "sandbox.channel", "sandbox.launcher", "sandbox.bugs"]
    for mod in torch_free:
        seen, todo = set(), [mod]
        while todo:
            m = todo.pop()
            if m in seen:
                continue
            seen.add(m)
            todo += g[m]
        for m in seen:
            src = open(MODULES[m]).read()
            tree = ast.parse(src)
            top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
            names = [a.name for n in top if isinstance(n, ast.Import) for a in n.names] + \
                    [n.module for n in top if isinstance(n, ast.ImportFrom) and n.module]
            assert not any(n == "torch" or n.startswith("torch.") for n in names), f"{m} (needed by {mod}) imports torch"


def test_no_private_names_across_modules():
    bad = []
    for mod, path in MODULES.items():
        aliases = {}
        for dep, names, line in _imports(path):
            bad += [f"{mod}:{line} imports {dep}.{n}" for n in names if n.startswith("_") and dep != mod]
        tree = ast.parse(open(path).read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "sandbox":
                aliases.update({(a.asname or a.name): f"sandbox.{a.name}" for a in node.names})
            elif isinstance(node, ast.Import):
                aliases.update({(a.asname or a.name): a.name for a in node.names})
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                target = aliases.get(node.value.id)
                if target in MODULES and target != mod:
                    bad.append(f"{mod}:{node.lineno} uses {target}.{node.attr}")
                if node.value.id == "signal" and node.attr == "_value2member_map_":
                    bad.append(f"{mod}:{node.lineno} uses signal.Signals._value2member_map_")
        if "_value2member_map_" in open(path).read():
            bad.append(f"{mod} uses Signals._value2member_map_")
    assert bad == []
