"""The engine's import graph: no module imports itself back through others, no import runs from a lower layer to a
higher one, the engine's rooms (its top-level packages and modules) import each other in one direction only, and no
import inside a function is there to dodge a cycle. Every `import engine...` counts, also one made inside a function,
and so does a module started by its name (`python -m engine...`, importlib): it runs the same code."""
from tests.import_graph import find_cycle, modules, reaches, scan

# lowest first; a module may import its own layer and the layers below it (the longest prefix names its layer)
LAYERS = [
    ["engine.errors",  # ConfigError: anything may raise it
     "engine.metric_names"],  # the logged metrics' names: anything may log or read them (the server too)
    ["engine.rollout.registry"],  # the rollout backends and what each supports: the config's checks read it
    ["engine.config", "engine.protocol"],
    ["engine.algos", "engine.data", "engine.tools", "engine.loggers", "engine.reward",
     "engine.distributed",  # FSDP2 sharding, worker groups: below the rollout and the roles
     "engine.checkpoint",  # sharded checkpoints, the Hugging Face export
     "engine.adapters"],  # LoRA: wrapping a role, merged weights for the rollout, the adapter switched off
    ["engine.rollout"],  # every generation backend, its kernels, the agent loop
    ["engine.workers",  # the roles as they run on a device, the worker that hosts them, the behaviour copy
     "engine.models", "engine.model_merger"],
    ["engine.trainer"],  # the driver: it reaches the workers through the worker group, by method name only
    ["engine.builtins", "engine.main_ppo", "engine.api", "engine.bench", "engine"],
]

# Imports inside a function that stay there, by importing module, each for its reason (none may close a cycle: see
# the last test). A module not named here imports at its top.
LIGHT = "the server imports `engine` and the config: torch and the run's parts load when a run starts"
LAZY = {
    "engine": "engine.api loads on first use (`engine.train`)",
    "engine.api": LIGHT,
    "engine.main_ppo": LIGHT,
    "engine.builtins": "each built-in asset builds its files on first use only",
    "engine.loggers.tracking": "each logger backend (tensorboard, mlflow, wandb, the dashboard) loads only where used",
    "engine.model_merger.to_hf": "a LoRA checkpoint's pieces load only for a LoRA checkpoint",
    "engine.models.tiny_calc": "the tiny calculator's agent rollout and scoring load only where it is built",
    "engine.reward.default": "each data source's reward function loads only where the data names it",
    "engine.rollout.static_decoder": "the Triton kernels: GPU only",
    "engine.rollout.static_attention": "the Triton decode attention: GPU only",
    "engine.rollout.decode_kernels": "the Triton kernels, loaded to check them: GPU only",
    "engine.workers.launch": "Ray's worker group: ray_init.mode=ray only (an in-process run never imports Ray)",
}
LAZY_ROOMS = {"engine.bench": "each benchmark command loads only what it runs"}


MODULES = modules("engine")


SCANS = {name: scan(path, MODULES, by_name=True) for name, path in MODULES.items()}
GRAPH = {name: imports for name, (imports, _) in SCANS.items()}


def _layer(module: str) -> int:
    best = max((p for layer in LAYERS for p in layer if module == p or module.startswith(p + ".")), key=len)
    return next(i for i, layer in enumerate(LAYERS) if best in layer)


def _room(module: str) -> str:
    """The room a module is in: its top-level package (engine.workers), or itself for a top-level module."""
    return ".".join(module.split(".")[:2])


def test_every_engine_module_has_a_layer_and_every_import_a_module():
    for module, targets in GRAPH.items():
        _layer(module)
        assert targets <= MODULES.keys(), f"{module} imports {sorted(targets - MODULES.keys())}, which do not exist"


def test_no_import_runs_up_a_layer():
    upward = [f"{m} -> {t}" for m, targets in GRAPH.items() for t in targets if _layer(t) > _layer(m)]
    assert not upward, f"imports from a lower layer to a higher one: {upward}"


def test_no_import_cycle():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_rooms_import_each_other_in_one_direction():
    """A folder of the engine is one room: two rooms that import each other, through any of their modules, have
    one arrow running back up (the worker importing the trainer's async folder, whose rollout child imported the
    worker back, was one)."""
    rooms: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        rooms.setdefault(_room(module), set()).update(_room(t) for t in targets if _room(t) != _room(module))
    cycle = find_cycle(rooms)
    assert cycle is None, "rooms of the engine that import each other: " + " -> ".join(cycle)


def test_the_worker_side_never_imports_the_trainer():
    """The driver hands the workers what they need (the run-ahead, by argument); no worker module reads the trainer."""
    wrong = [f"{m} -> {t}" for m, targets in GRAPH.items() if _room(m) == "engine.workers"
             for t in targets if _room(t) == "engine.trainer"]
    assert not wrong, f"the worker side imports the trainer: {wrong}"


def _parents(module: str) -> list[str]:
    """The packages whose __init__ runs before `module` does."""
    parts = module.split(".")
    return [p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in MODULES]


def test_an_import_inside_a_function_has_a_reason_and_dodges_no_cycle():
    """An import made inside a function is one the module could not make at its top without a cycle (a dodge), or
    one that waits to load something heavy or optional. A dodge: the imported module, or a package whose __init__
    runs before it, leads back to the importer (the order in which Python runs the modules is all that breaks such
    a cycle). None is allowed; the others where LAZY says why."""
    top = {m: targets - SCANS[m][1] for m, targets in GRAPH.items()}  # the imports at a module's top
    dodges, unexplained = [], []
    for module, (_, lazy) in SCANS.items():
        # what importing a module runs: its imports at the top, and first its packages' __init__, except those begun
        # already when the importer runs (its own packages, or itself: a package importing its own submodules)
        ready = {*_parents(module), module}
        eager = {m: (t | set(_parents(m))) - ready for m, t in top.items()}
        for target in sorted(lazy):
            if reaches(eager, target, module):
                dodges.append(f"{module} -> {target}")
            if module not in LAZY and _room(module) not in LAZY_ROOMS:
                unexplained.append(f"{module} -> {target}")
    assert not dodges, f"imports inside a function that close a cycle: {dodges}"
    assert not unexplained, (f"imports inside a function with no reason in LAZY (import at the top, or say why): "
                             f"{unexplained}")
