"""The engine's error types of user problems. Their own module below every layer of the engine, so that anything
may raise them (the config's checks, the rollout registry, the tool loader, the data loader) without importing
the config.

`UserError` is every problem the user fixes in the config, the data or their own code (the command line prints it
without a traceback and exits with 2); `ConfigError` the ones a config key names, found by resolve() before any job
starts wherever a check needs nothing but the config."""
from __future__ import annotations


class UserError(Exception):
    """A problem the user fixes, with a message meant for them (no traceback needed).

    `key`: the dotted config key it is about (None when no single key is); the API names the form field with it.
    `fix`: what to do about it, when that is a sentence of its own; the text of the error ends with it."""

    def __init__(self, message: str, key: str | None = None, fix: str | None = None):
        self.message = message
        self.key = key
        self.fix = fix
        super().__init__(f"{message} {fix}" if fix else message)

    def __reduce__(self):  # key and fix survive a pickle (an error raised on a Ray worker)
        return type(self), (self.message, self.key, self.fix)


class ConfigError(UserError, ValueError):
    """A configuration problem: a value, or a combination of values, the engine cannot run."""


def is_user_error(exc: BaseException) -> bool:
    """Whether `exc` is the user's to fix: one of ours, a missing file, or a feature the user asked for that is
    not implemented (the message says which)."""
    return isinstance(exc, (UserError, FileNotFoundError, NotImplementedError))
