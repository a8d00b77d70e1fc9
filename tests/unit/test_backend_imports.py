"""The backend uses the engine through its public face only: the names a package exports (`engine.config`,
`engine.tools`, `engine.trainer`, `engine`) and the modules documented as an interface of their own (the dashboard
logger a client uses, the built-in assets), never a private helper or a module behind a package's exports."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = {"engine", "engine.config", "engine.tools", "engine.trainer", "engine.loggers.dashboard", "engine.builtins"}


def _engine_imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "engine":
                    yield alias.name, None
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "engine":
            for alias in node.names:
                yield node.module, alias.name


def test_the_backend_imports_only_public_engine_names():
    wrong = []
    for path in sorted((ROOT / "backend").rglob("*.py")):
        for module, name in _engine_imports(path):
            if module == "engine" and name is not None:  # `from engine import builtins`: the module
                module, name = f"engine.{name}", None
            if module not in PUBLIC or (name or "").startswith("_"):
                wrong.append(f"{path.relative_to(ROOT)}: {module}" + (f".{name}" if name else ""))
    assert not wrong, f"the backend reaches past the engine's public names: {wrong}"


def test_what_the_backend_imports_is_exported():
    import importlib

    for path in sorted((ROOT / "backend").rglob("*.py")):
        for module, name in _engine_imports(path):
            exported = getattr(importlib.import_module(module), "__all__", None)
            if name and exported is not None:
                assert name in exported, f"{path.relative_to(ROOT)} imports {module}.{name}, which it does not export"
