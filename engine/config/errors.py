"""The one error type of configuration problems (its own module, so anything may raise it without importing
the schema or the loader)."""


class ConfigError(ValueError):
    """A configuration problem, with a message meant for the user (no traceback needed)."""
