"""Fixtures for engine integration tests: the built-in tiny model, small arith data, and a helper that
runs `python -m engine.main_ppo` as a real subprocess (which starts its own local Ray)."""
from __future__ import annotations

from pathlib import Path

import pytest

@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    from engine.models.tiny import ensure_tiny_model

    return ensure_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def arith_data(tmp_path_factory) -> Path:
    from engine.data.arith import prepare_arith

    directory = tmp_path_factory.mktemp("arith")
    prepare_arith(directory, train_size=64, test_size=32)
    return directory
