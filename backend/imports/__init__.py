"""Runs made elsewhere, read into rlstudio: a verl `file`-logger JSONL (+ its generation dumps and Hydra config)
or TensorBoard event files. The readers here only parse (streaming, a line or a record at a time) and say what
is wrong where (`BadFile`: the file, the line, the problem); `backend/services/imports.py` stores what they
yield; `backend/api/routes/imports.py` (upload) and `backend/import_run.py` (command line) feed them."""
from backend.imports.errors import BadFile

__all__ = ["BadFile"]
