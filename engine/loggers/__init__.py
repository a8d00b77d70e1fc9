"""Loggers behind one interface (base.Logger); `build_loggers` turns trainer.logger into instances."""
from engine.loggers.base import Logger
from engine.loggers.tracking import Tracking, build_loggers, check_loggers

__all__ = ["Logger", "Tracking", "build_loggers", "check_loggers"]
