"""The engine's import graph: no module imports itself back through others, and no import runs from a lower layer
to a higher one. Every `import engine...` counts, also one made inside a function."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# lowest first; a module may import its own layer and the layers below it
LAYERS = [
    ["engine.config", "engine.protocol"],
    ["engine.algos", "engine.data", "engine.tools", "engine.loggers", "engine.reward",
     "engine.distributed",  # FSDP2 sharding, worker groups: below the rollout and the roles
     "engine.checkpoint",  # sharded checkpoints, the Hugging Face export
     "engine.adapters"],  # LoRA: wrapping a role, merged weights for the rollout, the adapter switched off
    ["engine.rollout"],  # every generation backend, its kernels, the agent loop
    ["engine.workers",  # the roles as they run on a device, and the worker that hosts them
     "engine.trainer", "engine.models", "engine.model_merger"],
    ["engine.builtins", "engine.main_ppo", "engine.api", "engine.bench", "engine"],
]


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in (ROOT / "engine").rglob("*.py")}


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "engine"}
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "engine":
            for alias in node.names:  # `from engine.x import y`: the module y when there is one, else engine.x
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in MODULES else node.module)
    return out


GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def _layer(module: str) -> int:
    best = max((p for layer in LAYERS for p in layer if module == p or module.startswith(p + ".")), key=len)
    return next(i for i, layer in enumerate(LAYERS) if best in layer)


def test_every_engine_module_has_a_layer_and_every_import_a_module():
    for module, targets in GRAPH.items():
        _layer(module)
        assert targets <= MODULES.keys(), f"{module} imports {sorted(targets - MODULES.keys())}, which do not exist"


def test_no_import_runs_up_a_layer():
    upward = [f"{m} -> {t}" for m, targets in GRAPH.items() for t in targets if _layer(t) > _layer(m)]
    assert not upward, f"imports from a lower layer to a higher one: {upward}"


def test_no_import_cycle():
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(GRAPH.get(module, ())):
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)
