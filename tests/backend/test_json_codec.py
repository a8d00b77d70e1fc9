"""The fast JSON paths keep the slow paths' meaning: non-finite numbers become null wherever they come from
(NaN/Infinity literals that Python's json writes, floats handed in from Python), nothing else changes."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from backend import json_codec
from backend.models.common import clean_json
from engine.loggers.dashboard_wire import plain as _plain

INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("value, expected", [
    ([1.0, 2.5, -3], [1.0, 2.5, -3]),
    ([1.0, NAN, 2.0], [1.0, None, 2.0]),
    ([INF, -INF], [None, None]),  # the sum is NaN: every value is looked at
    ([1e308, 1e308], [1e308, 1e308]),  # finite values whose sum overflows stay
    (["a", "b", ""], ["a", "b", ""]),
    ([None, 1.0, NAN], [None, 1.0, None]),
    ([[NAN, 1.0], {"k": INF}], [[None, 1.0], {"k": None}]),
    ([10 ** 400, 1], [10 ** 400, 1]),  # ints past float range are left as they are
    ([True, 2], [True, 2]),
    ([], []),
])
def test_clean_json_fast_and_slow_paths_agree(value, expected):
    assert clean_json(value) == expected
    assert clean_json({"x": value}) == {"x": expected}


def test_loads_reads_python_json_literals_as_null_and_dumps_writes_null():
    text = json.dumps({"a": [1.0, NAN, INF, -INF], "b": "NaN"})  # Python writes bare NaN / Infinity
    assert json_codec.loads(text) == {"a": [1.0, None, None, None], "b": "NaN"}
    assert json_codec.loads(text.encode()) == {"a": [1.0, None, None, None], "b": "NaN"}
    assert json.loads(json_codec.dumps({"a": [1.5, NAN], 3: "int key", "n": np.arange(3)})) == \
        {"a": [1.5, None], "3": "int key", "n": [0, 1, 2]}
    with pytest.raises(json.JSONDecodeError):
        json_codec.loads(b'{"a": [1,')


def test_logger_plain_converts_what_json_cannot_carry():
    import torch

    assert _plain(torch.tensor([1.0, float("nan"), 2.0])) == [1.0, None, 2.0]
    assert _plain([1, 2.5]) == [1, 2.5]
    assert _plain(("a", "b")) == ["a", "b"]
    assert _plain([np.float32(0.5), INF]) == [0.5, None]
    assert _plain([object]) == [str(object)]
    out = _plain([1.0, 2.0])
    assert out == [1.0, 2.0] and all(math.isfinite(v) for v in out)
