"""Fixtures for engine integration tests: the built-in tiny model, small arith data, and a helper that
runs `python -m engine.main_ppo` as a real subprocess (which starts its own local Ray)."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model(tiny_dir) -> str:
    """The session's tiny model folder (tests/conftest.py's tiny_dir) as the string an engine override takes."""
    return str(tiny_dir)


@pytest.fixture(scope="session")
def arith_data(tmp_path_factory) -> Path:
    from engine.data.arith import prepare_arith

    directory = tmp_path_factory.mktemp("arith")
    prepare_arith(directory, train_size=64, test_size=32)
    return directory


@pytest.fixture(scope="session")
def tiny_reward_model(tmp_path_factory) -> str:
    """A reward model as verl expects one: Qwen2ForTokenClassification with one label on the tiny model's config
    and tokenizer, randomly initialised (seeded), its head scaled so that scores clearly differ."""
    import torch
    from transformers import Qwen2ForTokenClassification

    from engine.models.tiny import build_char_tokenizer, tiny_config

    path = tmp_path_factory.mktemp("tiny-reward-model")
    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    model = Qwen2ForTokenClassification(tiny_config(tokenizer, num_labels=1))
    with torch.no_grad():
        model.score.weight.normal_(0, 1.0)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)
