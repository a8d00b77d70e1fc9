"""Tools for the multi-turn tests, importable by class_name in a tool config."""
import threading

from engine.tools import Tool


class Hangs(Tool):
    """Never answers."""

    def execute(self, arguments):
        threading.Event().wait()


class Raises(Tool):
    def execute(self, arguments):
        raise RuntimeError("the tool broke")
