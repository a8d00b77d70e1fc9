"""The config's error type, ConfigError (engine/errors.py: below every layer, so that any part of the engine may
raise it without importing the config)."""
from engine.errors import ConfigError

__all__ = ["ConfigError"]
