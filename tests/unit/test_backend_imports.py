"""The backend's import graph, as test_import_layers.py checks the engine's: no module imports itself back through
others, and no import inside a function is there to dodge a cycle; the few made inside a function say why in LAZY.
Only `backend.*` imports count here (pandas, Ray, uvicorn and the like may load late without a reason listed)."""
from tests.import_graph import find_cycle, modules, reaches, scan

CLI = "a command line loads the server's parts only once its arguments are read (`--help` stays quick)"
LAZY = {
    "backend.__main__": CLI,
    "backend.import_run": CLI,
    "backend.models.run": "models sit below services: the preset names are read when the OpenAPI document is built",
    "backend.bench.samples": "the samples benchmark loads the UI tests' browser and the engine's logger only when run",
}


MODULES = modules("backend")


SCANS = {name: scan(path, MODULES) for name, path in MODULES.items()}
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
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_an_import_inside_a_function_has_a_reason_and_dodges_no_cycle():
    top = {m: targets - SCANS[m][1] for m, targets in GRAPH.items()}
    dodges, unexplained = [], []
    for module, (_, lazy) in SCANS.items():
        ready = {*_parents(module), module}
        eager = {m: (t | set(_parents(m))) - ready for m, t in top.items()}
        for target in sorted(lazy):
            if reaches(eager, target, module):
                dodges.append(f"{module} -> {target}")
            if module not in LAZY:
                unexplained.append(f"{module} -> {target}")
    assert not dodges, f"imports inside a function that close a cycle: {dodges}"
    assert not unexplained, (f"imports inside a function with no reason in LAZY (import at the top, or say why): "
                             f"{unexplained}")
