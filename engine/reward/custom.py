"""Loading a user's scoring function from a Python file (`custom_reward_function.path` / `.name`)."""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path

from engine.errors import UserError


class RewardFunctionError(UserError, ValueError):
    """The custom reward function could not be loaded; the message names the config key to fix."""


def load_custom_reward_fn(path: str | os.PathLike, name: str = "compute_score",
                          reward_kwargs: dict | None = None) -> Callable:
    """Imports the file at `path` and returns its function `name`.

    The function is called as fn(data_source=..., solution_str=..., ground_truth=..., extra_info=...) and
    returns a float or a dict with a "score" key. `reward_kwargs` are passed as extra keyword arguments.
    """
    file = Path(os.path.expanduser(str(path))).resolve()
    if not file.is_file():
        raise RewardFunctionError(f"custom reward file not found: {file} (custom_reward_function.path={path!s})")
    # A unique, stable module name per file, registered in sys.modules so pickling/dataclasses inside work.
    module_name = f"custom_reward_{file.stem}_{hashlib.sha1(str(file).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(module_name, None)
        raise RewardFunctionError(f"importing custom reward file {file} failed: {type(e).__name__}: {e}") from e

    if not hasattr(module, name):
        callables = sorted(n for n, v in vars(module).items()
                           if callable(v) and not n.startswith("_") and not inspect.isclass(v)
                           and getattr(v, "__module__", None) == module_name)
        raise RewardFunctionError(
            f"function {name!r} not found in {file}; set custom_reward_function.name to one of its functions: "
            f"{callables or '(none defined)'}")
    fn = getattr(module, name)
    if not callable(fn):
        raise RewardFunctionError(f"{name!r} in {file} is a {type(fn).__name__}, not a function "
                                  "(custom_reward_function.name)")
    if not reward_kwargs:
        return fn

    @functools.wraps(fn)
    def with_kwargs(*args, **kwargs):
        return fn(*args, **{**dict(reward_kwargs), **kwargs})

    return with_kwargs
