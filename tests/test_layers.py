"""The package's layers: every import points down, and no modules import in a circle.

Read statically with ``ast``, so nothing is imported (``import mjxrunner`` alone
imports most modules, which would hide a cycle). Every import statement counts:
at module level, inside functions and methods, and under ``if TYPE_CHECKING:``.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import mjxrunner

PACKAGE = Path(mjxrunner.__file__).parent
LAYERS = ("engine", "kit", "tasks", "rl", "doors", "tools")
"""The subpackages, lowest first: a module may import from its own layer and below."""
ROOT = len(LAYERS)
"""The rank of the package's top-level modules (``mjxrunner``, ``mjxrunner.checkpoint``):
above every layer, so nothing in a layer imports them."""


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def rank(name: str) -> int:
    """The layer of module ``name``: its index in :data:`LAYERS`, or :data:`ROOT`."""
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else ROOT


def all_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


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
        for node in all_imports(tree):
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


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module from a higher layer than its own."""
    return sorted(f"{a} -> {b}" for a, edges in graph.items() for b in edges if rank(b) > rank(a))


def test_the_graph_is_read_with_imports_inside_functions():
    graph = import_graph()
    assert "mjxrunner.engine" in graph["mjxrunner.doors.runner"]  # from mjxrunner import engine
    assert "mjxrunner.doors.runner" in graph["mjxrunner"]
    # cli imports the runner inside a function only
    assert "mjxrunner.doors.runner" in graph["mjxrunner.tools.cli"]


def test_every_module_is_in_a_layer():
    top = {n for n in modules() if rank(n) == ROOT}
    assert top == {"mjxrunner", "mjxrunner._aliases", "mjxrunner.checkpoint"}


def test_imports_only_point_down():
    assert upward(import_graph()) == []


def test_no_import_cycle_between_package_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_checks_find_what_they_look_for():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    graph = {"mjxrunner.engine.core": {"mjxrunner.rl.env"}, "mjxrunner.rl.env": set()}
    assert upward(graph) == ["mjxrunner.engine.core -> mjxrunner.rl.env"]
    assert upward({"mjxrunner.kit.render": {"mjxrunner"}}) == ["mjxrunner.kit.render -> mjxrunner"]


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_says_what_it_may_import(layer):
    doc = ast.get_docstring(ast.parse((PACKAGE / layer / "__init__.py").read_text()))
    assert doc and "May import" in doc


def test_old_paths_are_the_moved_modules():
    """A moved module keeps its old path: the same module object, warning unless the
    README named the path (``mjxrunner.env``, ``mjxrunner.sb3``)."""
    code = (
        "import warnings, mjxrunner\n"
        "import stable_baselines3  # its own import's warnings are not ours to count\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    import mjxrunner.env, mjxrunner.runner, mjxrunner.sb3\n"
        "    from mjxrunner import worlds\n"
        "import mjxrunner.rl.env, mjxrunner.doors.runner, mjxrunner.engine.worlds\n"
        "import mjxrunner.doors.sb3\n"
        "assert mjxrunner.env is mjxrunner.rl.env\n"
        "assert mjxrunner.runner is mjxrunner.doors.runner\n"
        "assert mjxrunner.sb3 is mjxrunner.doors.sb3\n"
        "assert worlds is mjxrunner.engine.worlds\n"
        "print(sorted(str(x.message) for x in w if x.category is DeprecationWarning))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(
        [
            "mjxrunner.runner is deprecated: import mjxrunner.doors.runner",
            "mjxrunner.worlds is deprecated: import mjxrunner.engine.worlds",
        ]
    )


def test_import_mjxrunner_imports_no_trainer():
    """The trainers and the train extra are optional: only their adapter modules and
    ``mjxrunner.tools.train`` import them, and the command line only when a command
    needs them."""
    extras = ("torch", "brax", "rsl_rl", "skrl", "tensordict", "flax", "stable_baselines3",
              "optax", "onnx", "onnxruntime", "tensorboardX")  # fmt: skip
    code = (
        "import sys, mjxrunner, mjxrunner.gym, mjxrunner.tools.cli; "
        "mjxrunner.tools.cli.parser(); "
        f"print(sorted(m for m in {extras!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
