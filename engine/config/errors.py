"""The one error type of configuration problems (its own module, so anything may raise it without importing
the schema or the loader)."""
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
