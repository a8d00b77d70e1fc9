"""Database engine and migrations (Alembic, applied on start; never create_all)."""
from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import create_engine

from backend import json_codec

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def normalize_url(url: str) -> str:
    """`postgresql://` and `postgres://` (what PostgreSQL's own tools and most hosts print) mean psycopg 3, the
    driver rlstudio is tested with (SQLAlchemy's default for them is psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url.removeprefix(prefix)
    return url


def make_engine(url: str) -> Engine:
    url = normalize_url(url)
    is_sqlite = url.startswith("sqlite")
    connect_args = {"check_same_thread": False, "timeout": 30} if is_sqlite else {}
    # JSON columns hold the samples' per-token arrays: orjson writes them ~10x faster than json.dumps
    engine = create_engine(url, connect_args=connect_args, pool_pre_ping=not is_sqlite,
                           json_serializer=json_codec.dumps, json_deserializer=json_codec.loads)
    if engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg":
        @event.listens_for(engine, "connect")
        def _nul_safe_text(dbapi_conn, _record):
            nul_safe_text(dbapi_conn)
    if is_sqlite:
        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # every new connection: WAL, FKs, wait instead of failing
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
    return engine


REPLACEMENT = "\ufffd"
_NUL_SAFE: list = []


def nul_safe_text(connection) -> None:
    """PostgreSQL's text cannot hold NUL ("\\x00"; SQLite's can): on this psycopg connection every string sent
    (a model's answer, a log line, a search term) has its NULs replaced by U+FFFD, the replacement character,
    instead of failing the whole request. JSON values are unaffected (their NULs are escaped, as \\u0000)."""
    if not _NUL_SAFE:
        from psycopg.types.string import StrBinaryDumper, StrDumperUnknown  # psycopg's defaults for str

        # binary first, text last: the text dumper stays the one psycopg picks for a plain %s (AUTO)
        for base in (StrBinaryDumper, StrDumperUnknown):
            class NulSafe(base):
                def dump(self, obj: str):
                    return super().dump(obj.replace("\x00", REPLACEMENT) if "\x00" in obj else obj)
            _NUL_SAFE.append(NulSafe)
    for dumper in _NUL_SAFE:
        connection.adapters.register_dumper(str, dumper)


def alembic_config(url: str) -> Config:
    url = normalize_url(url)
    cfg = Config(str(MIGRATIONS_DIR / "alembic.ini"))
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["configure_logger"] = False
    return cfg


def upgrade(url: str) -> None:
    """Migrate to head. Migrations run on a plain connection: SQLite batch mode recreates tables, which
    must not cascade through foreign keys; the app's connections (WAL, foreign keys on) come after."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(url), "head")
