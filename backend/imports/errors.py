"""What an import refuses: one error naming the file, the line (or record) and the problem."""
from __future__ import annotations


class BadFile(ValueError):
    """A file that cannot be imported as given. `field` is the upload field it came in (`metrics`, `config`,
    `rollout`, `validation`, `events`), for the API's 422 `loc`; `line` is 1-based (None: the file as a whole)."""

    def __init__(self, file: str, problem: str, *, line: int | None = None, field: str = "metrics",
                 unit: str = "line"):
        self.file, self.problem, self.line, self.field, self.unit = file, problem, line, field, unit
        where = f"{file} {unit} {line}" if line is not None else file
        super().__init__(f"{where}: {problem}")
