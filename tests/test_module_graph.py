"""The import graph of the product's modules is one-way.

Edges (views, admin, commands, Celery tasks) → services (lifecycle,
results, dispatch, timers, waiting, schedules) → the executor → {the
decider, snapshots, attempts, runs, the controls in quotas} → models. A
module never imports, at its top or inside a function, a module that
imports it back, directly or through others: a cycle is how a control
attached below comes to be bypassed from above (docs/engine.md, "Layers").
The benchmark, soak and stress tools (``tools/``) and the tests drive the
product from outside: they may import any of it, and nothing in it, its
commands and migrations included, imports them.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PRODUCT = ("executions", "quotas", "metadata", "nodeflow", "console", "conductor_api", "nodeflow_worker")
OUTSIDE = ("tools", "tests")
PACKAGES = (*PRODUCT, "tools")
# The engine's layers, lowest first: a module may import only from its own
# layer's lower neighbours, never from a layer above it.
LAYERS = [
    {"executions.models", "quotas.models", "metadata.models", "nodeflow.models"},
    {
        "executions.attempts",
        "executions.runs",
        "executions.snapshots",
        "executions.leases",
        "executions.decider",
        "quotas.gate",
        "quotas.admission",
        "quotas.starts",
        "quotas.namespace_quotas",
        "quotas.semaphores",
    },
    {"executions.executor"},
    {
        "executions.lifecycle",
        "executions.results",
        "executions.dispatch",
        "executions.timers",
        "executions.waiting",
        "quotas.schedules",
    },
]


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts and "management" not in path.parts:
                found[_module_name(path)] = path
    return found


def _imports(path: pathlib.Path, name: str, known: set[str]) -> set[str]:
    """Project modules ``path`` imports, wherever the import statement is."""
    return {t for t in _targets(path, name) if t in known and t != name}


def _targets(path: pathlib.Path, name: str) -> set[str]:
    """Every module (or name in one) ``path`` imports, absolute, outside ``if TYPE_CHECKING:``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    tree = ast.parse(path.read_text())
    typing_only = {id(inner) for node in ast.walk(tree) if _is_type_checking(node) for inner in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue  # `if TYPE_CHECKING:` imports never run
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            targets.add(base)
            targets |= {f"{base}.{alias.name}" for alias in node.names}
    return targets


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, name, known) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_one_that_imports_it_back():
    graph = _graph()
    # A package's __init__ importing its own submodules is not a cycle of the architecture.
    graph = {n: {t for t in ts if n != t.rpartition(".")[0]} for n, ts in graph.items()}
    assert _cycles(graph) == []


def test_no_layer_imports_a_layer_above_it():
    graph = _graph()
    rank = {module: level for level, members in enumerate(LAYERS) for module in members}
    upward = [
        f"{module} → {target}"
        for module, targets in graph.items()
        if module in rank
        for target in targets
        if target in rank and rank[target] > rank[module]
    ]
    assert upward == []


def _reaches_outside(path: pathlib.Path, name: str) -> list[str]:
    return sorted(t for t in _targets(path, name) if t.split(".")[0] in OUTSIDE)


def test_the_product_imports_neither_tools_nor_tests():
    found = [
        f"{_module_name(path)} → {target}"
        for package in PRODUCT
        for path in (ROOT / package).rglob("*.py")
        for target in _reaches_outside(path, _module_name(path))
    ]
    assert found == []


def test_the_outside_check_sees_imports_inside_functions(tmp_path):
    path = tmp_path / "example.py"
    path.write_text("def run():\n    from tools import bench\n    import tests.procs.stack\n")
    assert _reaches_outside(path, "nodeflow.example") == ["tests.procs.stack", "tools", "tools.bench"]
