"""A package's import graph from its source (ast, nothing imported): what tests/unit/test_import_layers.py (the
engine) and tests/unit/test_backend_imports.py (the backend) check for cycles, layers and function-level imports."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules(package: str) -> dict[str, Path]:
    """Every module of `package` by its dotted name (a package by its own name, not `__init__`)."""
    def name(path: Path) -> str:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return {name(p): p for p in (ROOT / package).rglob("*.py")}


def scan(path: Path, known: dict[str, Path], *, by_name: bool = False) -> tuple[set[str], set[str]]:
    """(every module of the package the file imports, those imported inside a function). With `by_name`, a string
    that names a module (`python -m pkg.x`, importlib) counts as an import: it runs the same code."""
    package = next(iter(known)).split(".")[0]
    tree = ast.parse(path.read_text())
    inside = {id(node) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
              for node in ast.walk(fn)}
    out, lazy = set(), set()
    for node in ast.walk(tree):
        found = set()
        if isinstance(node, ast.Import):
            found = {a.name for a in node.names if a.name.split(".")[0] == package}
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == package:
            for alias in node.names:  # `from pkg.x import y`: the module y when there is one, else pkg.x
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
        elif by_name and isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known \
                and node.value.count(".") >= 2:
            found = {node.value}
        out |= found
        if id(node) in inside and isinstance(node, (ast.Import, ast.ImportFrom)):
            lazy |= found
    own = {name for name, p in known.items() if p == path}  # a script that runs itself in a subprocess: no cycle
    return out - own, lazy - own


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return False
