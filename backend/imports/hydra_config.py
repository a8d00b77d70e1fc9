"""A verl run's config: what Hydra saved beside its outputs (`outputs/<date>/<time>/.hydra/config.yaml`, the
composed config with its `${...}` interpolations as written) or any YAML / JSON file of the same tree. Read with
OmegaConf and resolved where it resolves (an interpolation naming a resolver verl registers at run time is kept
as written, with a note)."""
from __future__ import annotations

from typing import IO, Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from backend.imports.errors import BadFile

MAX_CONFIG_BYTES = 16 * 1024 * 1024  # a composed verl config is ~30 KB


def read_config(stream: IO[bytes], file: str) -> tuple[dict[str, Any], str | None]:
    """(the config tree, a note or None); BadFile naming the line of a YAML error."""
    raw = stream.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise BadFile(file, f"over {MAX_CONFIG_BYTES // 2**20} MiB: is this the run's .hydra/config.yaml?",
                      field="config")
    try:
        tree = yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise BadFile(file, f"not UTF-8 text (byte {exc.start + 1})", field="config") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BadFile(file, f"not YAML: {problem}" + (f" (column {mark.column + 1})" if mark else ""),
                      line=mark.line + 1 if mark else None, field="config") from None
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):
        raise BadFile(file, f"a YAML {type(tree).__name__}, not a mapping of config keys (verl's config is one, "
                            "e.g. .hydra/config.yaml)", field="config")
    try:
        resolved = OmegaConf.to_container(OmegaConf.create(tree), resolve=True)
    except (OmegaConfBaseException, ValueError, TypeError) as exc:
        return _plain(tree), f"kept as written: an interpolation did not resolve ({str(exc).splitlines()[0][:200]})"
    return _plain(resolved), None


def _plain(value: Any) -> Any:
    """JSON-storable: keys as strings, dates and other YAML scalars as text."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
