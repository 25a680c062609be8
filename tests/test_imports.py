"""The package's import graph: no cycles between modules at import time.

Read statically with ``ast``, so nothing is imported: ``import mjxrunner`` alone
imports most modules, which would hide a cycle.
"""

import ast
from pathlib import Path

import mjxrunner

PACKAGE = Path(mjxrunner.__file__).parent


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def import_time_nodes(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported: module level, also inside
    ``if``/``try``/``with`` blocks, but not in functions, classes' methods or
    ``if TYPE_CHECKING:`` blocks."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        elif is_type_checking(node):
            todo.extend(node.orelse)
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.ClassDef, ast.ExceptHandler)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                todo.extend(getattr(node, field, None) or [])
    return found


def targets(node: ast.Import | ast.ImportFrom, name: str, is_package: bool, known) -> set[str]:
    """The package modules an import statement of module ``name`` loads."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    base = node.module or ""
    if node.level:  # relative: from the module's package, up level - 1
        package = name.split(".") if is_package else name.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([base] if base else []))
    out = set()
    for alias in node.names:
        full = f"{base}.{alias.name}"
        if full in known:
            out.add(full)  # a submodule
        elif base in known:
            out.add(base)  # a name defined in the module
    return out


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        edges = set()
        for node in import_time_nodes(tree):
            edges |= targets(node, name, path.name == "__init__.py", known)
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_is_read():
    graph = import_graph()
    assert "mjxrunner.engine" in graph["mjxrunner.runner"]
    assert "mjxrunner.engine" in graph["mjxrunner.checkpoint"]
    assert "mjxrunner.runner" in graph["mjxrunner"]


def test_no_import_cycle_between_package_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_a_cycle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_checkpoint_never_imports_the_runner():
    """The checkpoint module builds runners from the class it is given; only its
    deprecated ``load`` imports the package (for ``MultiEnvRunner``)."""
    tree = ast.parse((PACKAGE / "checkpoint.py").read_text())
    known = modules()
    functions = {}  # import node -> name of the module-level function it is in
    for top in tree.body:
        for node in ast.walk(top):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                functions[node] = top.name if isinstance(top, ast.FunctionDef) else None
    runner_imports = []
    for node, function in functions.items():
        loaded = targets(node, "mjxrunner.checkpoint", False, known)
        names = {a.name for a in node.names}
        if "mjxrunner.runner" in loaded or ("mjxrunner" in loaded and "MultiEnvRunner" in names):
            runner_imports.append((node.lineno, function))
    assert [f for _, f in runner_imports] == ["load"], runner_imports
    graph = import_graph()  # and the runner imports it only inside its methods
    assert "mjxrunner.checkpoint" not in graph["mjxrunner.runner"]
    assert "mjxrunner.runner" not in graph["mjxrunner.checkpoint"]


def test_import_mjxrunner_imports_no_trainer():
    """The trainers are optional extras: only their adapter modules import them."""
    import subprocess
    import sys

    code = (
        "import sys, mjxrunner, mjxrunner.gym; "
        "print(sorted(m for m in ('torch', 'brax', 'rsl_rl', 'skrl', 'tensordict', 'flax') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
