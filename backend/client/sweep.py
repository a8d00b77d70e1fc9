"""A grid of runs over config keys (Hydra's multirun syntax: `key=a,b,c`) in one experiment, and its results
table. `python -m backend.client sweep ...` is the command line."""
from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from backend.client.api import Client
from backend.models import RunPublic
from engine import metric_names
from engine.config import split_choices

# what a results table shows unless told otherwise: held-out reward per data source, and the training score
DEFAULT_METRICS = (metric_names.VAL_SCORE_PATTERN, re.escape(metric_names.SCORE))


# the engine's value grammar (engine/config/values.py): a sweep's `key=a,b,c` split where Hydra splits it
split_top_level = split_choices


def parse_grid(arguments: Sequence[str]) -> tuple[dict[str, list[str]], list[str]]:
    """`key=v1,v2` arguments are axes of the grid; `key=v` ones are fixed overrides for every run."""
    grid: dict[str, list[str]] = {}
    fixed: list[str] = []
    for argument in arguments:
        key, sep, value = argument.partition("=")
        if not sep or not key:
            raise ValueError(f"'{argument}': expected key=value or key=value1,value2,... (e.g. "
                             "actor_rollout_ref.actor.optim.lr=1e-4,3e-4)")
        values = split_top_level(value)
        if len(values) > 1:
            if key in grid:
                raise ValueError(f"{key}: given twice; put all its values in one argument")
            if any(not v for v in values):
                raise ValueError(f"{key}: an empty value in '{value}'")
            grid[key] = values
        else:
            fixed.append(argument)
    return grid, fixed


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """The shortest dotted suffix that tells each key apart: actor...optim.lr -> 'lr' (or 'actor.optim.lr'
    when critic.optim.lr is swept too)."""
    names = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            suffix = ".".join(parts[-n:])
            if not any(other != key and (other == suffix or other.endswith("." + suffix)) for other in keys):
                break
        names[key] = suffix
    return names


def combinations(grid: dict[str, list[str]]) -> list[dict[str, str]]:
    """Every point of the grid, the last key varying fastest."""
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


def stop_rule(stop_on: Sequence[str], stop_after_steps: int = 1) -> list[str]:
    """The overrides of the auto-stop rule: the server cancels a run once one of the `stop_on` health alarms (e.g.
    kl-high, nonfinite, score-collapse) has fired for `stop_after_steps` steps, with the alarm as its error."""
    if not stop_on:
        return []
    return [f"trainer.health.stop_on=[{','.join(stop_on)}]", f"trainer.health.stop_after_steps={stop_after_steps}"]


def sweep(client: Client, grid: dict[str, list[str]], *, fixed: Sequence[str] = (), preset: str | None = None,
          experiment: int | str | None = None, tags: Sequence[str] = (), prefix: str = "",
          stop_on: Sequence[str] = (), stop_after_steps: int = 1) -> list[RunPublic]:
    """Launch one run per grid point into `experiment`. Every config is validated first, so a bad value
    launches nothing (ApiError naming the key). `stop_on` (health alarm ids) and `stop_after_steps`: the server
    cancels a member whose chosen alarm has fired that many steps (a diverging member stops, the others go on)."""
    names = short_names(list(grid))
    points = combinations(grid)
    configs = [list(fixed) + stop_rule(stop_on, stop_after_steps) + [f"{k}={v}" for k, v in point.items()]
               for point in points]
    for overrides in configs:
        client.validate(overrides, preset=preset)
    runs = []
    for point, overrides in zip(points, configs):
        name = prefix + ",".join(f"{names[k]}={v}" for k, v in point.items())
        runs.append(client.launch(overrides, preset=preset, name=name, experiment=experiment, tags=tags))
    return runs


def results(client: Client, runs: Sequence[RunPublic], metrics: Sequence[str] = DEFAULT_METRICS,
            keys: Sequence[str] | None = None) -> list[dict]:
    """One row per run: id, name, the values of the swept `keys` (read from its resolved config), status, the
    last step, and the newest value of every metric key matching one of the `metrics` patterns."""
    patterns = [re.compile(p) for p in metrics]
    names = short_names(list(keys or []))
    rows = []
    for run in runs:
        run = client.run(run.id)
        latest = client.latest(run.id)
        row = {"run": run.id, "name": run.name}
        for key in keys or []:
            row[names[key]] = _dotted(run.resolved_config, key)
        row.update(status=run.status.value, step=run.progress_step)
        judged = client.health(run.id)
        if judged.status != "ok":  # a column only where some run is sick: its status and firing alarms
            row["health"] = judged.status + ":" + ",".join(a.id for a in judged.alarms if a.state == "firing")
        for pattern in patterns:
            row.update({k: v for k, v in sorted(latest.items()) if pattern.fullmatch(k)})
        if run.error:
            row["error"] = run.error.strip().splitlines()[-1][:120]
        rows.append(row)
    return rows


def _dotted(tree: dict, key: str):
    for part in key.lstrip("+~").split("."):  # Hydra's +key (a new key) names the same place
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def format_table(rows: list[dict]) -> str:
    """A plain-text table; columns are the union of the rows' keys, in first-seen order."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    def cell(value) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value)
    table = [columns] + [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    lines = ["  ".join(text.ljust(w) for text, w in zip(line, widths)).rstrip() for line in table]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths)] + lines[1:])
