"""The backend's import graph, as test_import_layers.py checks the engine's: no module imports itself back through
others, and no import inside a function is there to dodge a cycle; the few made inside a function say why in LAZY.
Only `backend.*` imports count here (pandas, Ray, uvicorn and the like may load late without a reason listed)."""
import ast
from pathlib import Path

from tests.unit.test_import_layers import _cycle, _reaches

ROOT = Path(__file__).resolve().parents[2]

CLI = "a command line loads the server's parts only once its arguments are read (`--help` stays quick)"
LAZY = {
    "backend.__main__": CLI,
    "backend.import_run": CLI,
    "backend.models.run": "models sit below services: the preset names are read when the OpenAPI document is built",
    "backend.bench.samples": "the samples benchmark loads the UI tests' browser and the engine's logger only when run",
}


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in (ROOT / "backend").rglob("*.py")}


def _scan(path: Path) -> tuple[set[str], set[str]]:
    """(every backend module the file imports, those imported inside a function)."""
    tree = ast.parse(path.read_text())
    inside = {id(node) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
              for node in ast.walk(fn)}
    out, lazy = set(), set()
    for node in ast.walk(tree):
        found = set()
        if isinstance(node, ast.Import):
            found = {a.name for a in node.names if a.name.split(".")[0] == "backend"}
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "backend":
            for alias in node.names:  # `from backend.x import y`: the module y when there is one, else backend.x
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
        out |= found
        if id(node) in inside:
            lazy |= found
    return out, lazy


SCANS = {name: _scan(path) for name, path in MODULES.items()}
GRAPH = {name: imports for name, (imports, _) in SCANS.items()}


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in MODULES]


def test_every_backend_import_names_a_module():
    for module, targets in GRAPH.items():
        assert targets <= MODULES.keys(), f"{module} imports {sorted(targets - MODULES.keys())}, which do not exist"


def test_no_import_cycle():
    """Every import counts, also one made inside a function: the health store and the samples service once imported
    each other that way (one through a function-level import)."""
    cycle = _cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_an_import_inside_a_function_has_a_reason_and_dodges_no_cycle():
    top = {m: targets - SCANS[m][1] for m, targets in GRAPH.items()}
    dodges, unexplained = [], []
    for module, (_, lazy) in SCANS.items():
        ready = {*_parents(module), module}
        eager = {m: (t | set(_parents(m))) - ready for m, t in top.items()}
        for target in sorted(lazy):
            if _reaches(eager, target, module):
                dodges.append(f"{module} -> {target}")
            if module not in LAZY:
                unexplained.append(f"{module} -> {target}")
    assert not dodges, f"imports inside a function that close a cycle: {dodges}"
    assert not unexplained, (f"imports inside a function with no reason in LAZY (import at the top, or say why): "
                             f"{unexplained}")
