"""Alembic from an empty database: upgrade head, downgrade base, again; and the models match head. On SQLite and on
PostgreSQL (the server tests/backend/postgres.py starts) where it matters: the schema, and a data migration."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text
from sqlmodel import SQLModel

import backend.models  # noqa: F401
from tests.backend.conftest import REPO

TABLES = {"experiment", "run", "metric_point", "metric_bucket", "sample", "log_line", "artifact", "event"}
# an empty database on each backend: `database` is None for SQLite (a new file in tmp_path), else its URL
EMPTY = ["sqlite", pytest.param("postgresql-empty", marks=pytest.mark.postgresql)]


@pytest.fixture
def url(database, tmp_path) -> str:
    return database or f"sqlite:///{tmp_path / 'm.db'}"


def alembic(db: Path | str, *args):
    url = db if isinstance(db, str) else f"sqlite:///{db}"
    env = {"RLSTUDIO_DATABASE_URL": url, "PATH": ""}
    result = subprocess.run([sys.executable, "-m", "alembic", "-c", "migrations/alembic.ini", *args], cwd=REPO,
                            env=env, check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result


def tables(db: Path | str) -> set[str]:
    if isinstance(db, str):
        engine = create_engine(db)
        try:
            return set(inspect(engine).get_table_names())
        finally:
            engine.dispose()
    with sqlite3.connect(db) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


@pytest.mark.parametrize("database", EMPTY, indirect=True)
def test_upgrade_downgrade_from_empty(url):
    alembic(url, "upgrade", "head")
    assert TABLES <= tables(url)
    alembic(url, "downgrade", "base")
    assert tables(url) & TABLES == set()
    alembic(url, "upgrade", "head")
    assert TABLES <= tables(url)


@pytest.mark.parametrize("database", EMPTY, indirect=True)
def test_models_match_migrations(url):
    alembic(url, "upgrade", "head")
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
    finally:
        engine.dispose()
    assert diff == [], f"models and migrations differ; add a migration: {diff}"


def test_server_start_applies_migrations(tmp_path):
    from backend.app import create_app
    from backend.settings import Settings

    settings = Settings(data_dir=tmp_path / "data", dispatch=False, frontend_dir=tmp_path / "no-ui")
    db = settings.data_dir / "rlstudio.db"
    assert not db.exists()  # an empty data dir (the settings fixture's holds a migrated copy)
    create_app(settings)
    assert TABLES <= tables(db)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_metric_buckets_backfilled_on_upgrade(tmp_path):
    """0002 adds metric_bucket and fills it from the points a 0001 database already holds."""
    db = tmp_path / "m.db"
    alembic(db, "upgrade", "0001")
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO experiment (id, name, created_at) VALUES (1, 'e', '2026-01-01')")
        conn.execute("INSERT INTO run (id, name, tags, notes, experiment_id, status, source, config, resolved_config, "
                     "created_at, ingest_token_hash, run_dir) VALUES (1, 'r', '[]', '', 1, 'succeeded', 'external', "
                     "'{}', '{}', '2026-01-01', 'x', '/tmp')")
        conn.executemany("INSERT INTO metric_point VALUES (1, ?, ?, ?, 0)",
                         [(k, s, None if s == 500 else float(s % 7)) for k in ("a", "b") for s in range(1000)])
    alembic(db, "upgrade", "head")
    with sqlite3.connect(db) as conn:
        top = conn.execute("SELECT key, n, min_value, max_value, nan_step FROM metric_bucket WHERE level = 22 "
                           "ORDER BY key").fetchall()
        assert top == [("a", 1000, 0.0, 6.0, 500), ("b", 1000, 0.0, 6.0, 500)]
        assert conn.execute("SELECT COUNT(*) FROM metric_bucket WHERE level = 4").fetchone()[0] == 2 * 63
    alembic(db, "downgrade", "0001")
    assert "metric_bucket" not in tables(db)


def js(value):
    """A JSON column's value: SQLite gives its text, PostgreSQL's driver the parsed value."""
    return json.loads(value) if isinstance(value, str) else value


@pytest.mark.parametrize("database", EMPTY, indirect=True)
def test_sample_turns_lifted_from_extras_on_upgrade(url):
    """0003 adds the turn columns and fills them from the extras, where an earlier dashboard logger put them; its
    downgrade puts them back there."""
    from tests.trajectory_samples import multi_turn_samples

    record = multi_turn_samples()[1]  # the call the calculator refused
    alembic(url, "upgrade", "0002")
    extras = {"turns": record["turns"], "num_turns": 4, "loss_mask": record["loss_mask"], "acc": 0}
    engine = create_engine(url)

    def rows(sql):
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO experiment (id, name, created_at) VALUES (1, 'e', '2026-01-01')"))
            conn.execute(text("INSERT INTO run (id, name, tags, notes, experiment_id, status, source, config, "
                              "resolved_config, created_at, ingest_token_hash, run_dir) VALUES (1, 'r', '[]', '', 1, "
                              "'succeeded', 'external', '{}', '{}', '2026-01-01', 'x', '/tmp')"))
            for i, ex in enumerate((extras, {"acc": 1})):
                conn.execute(text("INSERT INTO sample (id, run_id, step, split, sample_index, prompt, response, "
                                  "tokens, extras, wall_time) VALUES (:id, 1, 1, 'train', :i, '', '', :tokens, "
                                  ":extras, 0)"),
                             {"id": i + 1, "i": i, "tokens": json.dumps(record["tokens"]), "extras": json.dumps(ex)})
        alembic(url, "upgrade", "head")
        columns = "SELECT num_turns, tool_names, tool_error, extras, turns, loss_mask FROM sample ORDER BY id"
        (turns_n, names, error, extras_after, turns, mask), single = rows(columns)
        assert (turns_n, names, error, js(extras_after)) == (4, "|calculator|", 1, {"acc": 0})
        assert js(turns)[1]["error_message"] == "division by zero" and js(mask) == record["loss_mask"]
        assert single[:3] + (js(single[3]),) + single[4:] == (None, None, None, {"acc": 1}, None, None)

        # downgrade keeps the conversations: back in the extras, from where the next upgrade lifts them again
        alembic(url, "downgrade", "0002")
        down = [js(r[0]) for r in rows("SELECT extras FROM sample ORDER BY id")]
        assert down[0] == {"acc": 0, "turns": js(turns), "loss_mask": record["loss_mask"], "num_turns": 4}
        assert down[1] == {"acc": 1}
        alembic(url, "upgrade", "head")
        again = rows(columns)
    finally:
        engine.dispose()
    assert [(r[:3], js(r[3]), r[4] and js(r[4]), r[5] and js(r[5])) for r in again] == [
        ((4, "|calculator|", 1), {"acc": 0}, js(turns), record["loss_mask"]),
        ((None, None, None), {"acc": 1}, None, None)]
