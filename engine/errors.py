"""The one error type of configuration problems. Its own module below every layer of the engine, so that anything
may raise it (the config's checks, the rollout registry, the tool loader) without importing the config."""
from __future__ import annotations


class ConfigError(ValueError):
    """A configuration problem, with a message meant for the user (no traceback needed).

    `key`: the dotted config key it is about (None when no single key is); the API names the form field with it.
    `fix`: what to do about it, when that is a sentence of its own; the text of the error ends with it."""

    def __init__(self, message: str, key: str | None = None, fix: str | None = None):
        self.message = message
        self.key = key
        self.fix = fix
        super().__init__(f"{message} {fix}" if fix else message)
