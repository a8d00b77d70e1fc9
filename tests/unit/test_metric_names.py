"""The metric names the server reads by name come from engine/metric_names.py: the module is pure (the server imports
it without torch), every name in it is still written by the engine, and the server's health checks retype none."""
import ast
import re
import subprocess
import sys
from pathlib import Path

from engine import metric_names

ROOT = Path(__file__).resolve().parents[2]
NAMES = {k: v for k, v in vars(metric_names).items() if k.isupper() and isinstance(v, str) and k != "VAL_SCORE_PATTERN"}


def _sources(folder: str, skip: tuple[str, ...] = ()) -> dict[Path, str]:
    return {p: p.read_text() for p in (ROOT / folder).rglob("*.py") if not any(s in p.as_posix() for s in skip)}


def test_the_names_module_imports_nothing_heavy():
    tree = ast.parse((ROOT / "engine" / "metric_names.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"re", "__future__"}, imported
    out = subprocess.run([sys.executable, "-c", "import sys, engine.metric_names; print('torch' in sys.modules)"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# names the engine builds from a role or a prefix and a leaf: the leaf as the producer writes it
BUILT = {"ACTOR_LR": '/lr"', "ACTOR_GRAD_NORM": '/grad_norm"', "PG_CLIPFRAC": '"pg_clipfrac"',
         "TOOL_CALLS": 'tool_call_counts/mean"', "TURNS": 'num_turns/mean"'}


def test_every_name_is_written_by_the_engine():
    """A name the engine no longer writes (renamed at its producer) would leave a health check reading nothing."""
    engine = _sources("engine", skip=("engine/metric_names.py", "engine/bench/"))
    missing = []
    for const, value in NAMES.items():
        used = re.compile(rf"metric_names\.{const}\b")
        written = BUILT.get(const, f'"{value}')
        if not any(written in text or used.search(text) for text in engine.values()):
            missing.append(f"{const} = {value!r}")
    assert not missing, f"names no engine module writes (by the constant or the literal): {missing}"


def test_the_health_checks_retype_no_engine_name():
    values = set(NAMES.values())
    retyped = []
    for path, text in {**_sources("backend/services/health"),
                       **{ROOT / f: (ROOT / f).read_text() for f in ("backend/services/metrics.py",
                                                                      "backend/services/held_out.py")}}.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and node.value in values:
                retyped.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not retyped, f"engine metric names typed again instead of imported from engine.metric_names: {retyped}"


def test_the_held_out_pattern_reads_the_engine_s_validation_names():
    assert metric_names.VAL_SCORE.match("val-core/openai/gsm8k/acc/mean@4")
    assert metric_names.VAL_SCORE.match("val-core/tiny/reward/mean@1")
    assert not metric_names.VAL_SCORE.match("val-core/tiny/reward/best@4/mean")
