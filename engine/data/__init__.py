"""Data: preprocessing scripts (`python -m engine.data.gsm8k`), row files, prompt datasets and loaders."""
from engine.data.files import DataError, read_rows, write_parquet

__all__ = ["DataError", "read_rows", "write_parquet"]
