"""No import circle among queen_raft's modules.

A circle makes the import order decide what exists when, and it hides which module owns a concern.
Only module-level imports count (an import inside a function runs later, at call time), but those
under `if TYPE_CHECKING:` count too: a circle that exists only for the type checker is still two
modules that each need the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "queen_raft"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / PACKAGE


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_level_statements(body: list[ast.stmt]):
    """The statements that run at import: the body, and the branches of its if/try/with blocks."""
    for statement in body:
        yield statement
        if isinstance(statement, (ast.If, ast.Try, ast.With)):
            for branch in ("body", "orelse", "finalbody"):
                yield from module_level_statements(getattr(statement, branch, []) or [])
            for handler in getattr(statement, "handlers", []):
                yield from module_level_statements(handler.body)


def imported_modules(path: Path, name: str, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for statement in module_level_statements(tree.body):
        if isinstance(statement, ast.Import):
            found.update(alias.name for alias in statement.names)
        elif isinstance(statement, ast.ImportFrom):
            if statement.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (statement.level - 1)]
                source = ".".join(base + ([statement.module] if statement.module else []))
            else:
                source = statement.module or ""
            for alias in statement.names:
                # `from package import module` needs that module; `from module import name`, the module.
                submodule = f"{source}.{alias.name}"
                found.add(submodule if submodule in known else source)
    return {module for module in found if module in known and module != name}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE_DIR.rglob("*.py")}
    known = set(paths)
    return {name: imported_modules(path, name, known) for name, path in paths.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_graph_sees_the_package():
    graph = import_graph()
    assert "queen_raft.api.serving" in graph["queen_raft.api.app"] or any(
        "queen_raft.api.serving" in deps for deps in graph.values())
    assert "queen_raft.client.transport" in graph["queen_raft.client.queen"]


def test_find_cycles_reports_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycle_among_queen_raft_modules():
    assert find_cycles(import_graph()) == []
