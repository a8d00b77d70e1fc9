"""Alembic from an empty database: upgrade head, downgrade base, again; and the models match head."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine
from sqlmodel import SQLModel

import backend.models  # noqa: F401
from tests.backend.conftest import REPO

TABLES = {"experiment", "run", "metric_point", "metric_bucket", "sample", "log_line", "artifact", "event"}


def alembic(db, *args):
    env = {"RLSTUDIO_DATABASE_URL": f"sqlite:///{db}", "PATH": ""}
    result = subprocess.run([sys.executable, "-m", "alembic", "-c", "migrations/alembic.ini", *args], cwd=REPO,
                            env=env, check=False, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result


def tables(db) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def test_upgrade_downgrade_from_empty(tmp_path):
    db = tmp_path / "m.db"
    alembic(db, "upgrade", "head")
    assert TABLES <= tables(db)
    alembic(db, "downgrade", "base")
    assert tables(db) & TABLES == set()
    alembic(db, "upgrade", "head")
    assert TABLES <= tables(db)


def test_models_match_migrations(tmp_path):
    db = tmp_path / "m.db"
    alembic(db, "upgrade", "head")
    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), SQLModel.metadata)
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


def test_sample_turns_lifted_from_extras_on_upgrade(tmp_path):
    """0003 adds the turn columns and fills them from the extras, where an earlier dashboard logger put them; its
    downgrade puts them back there."""
    from tests.trajectory_samples import multi_turn_samples

    record = multi_turn_samples()[1]  # the call the calculator refused
    db = tmp_path / "m.db"
    alembic(db, "upgrade", "0002")
    extras = {"turns": record["turns"], "num_turns": 4, "loss_mask": record["loss_mask"], "acc": 0}
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO experiment (id, name, created_at) VALUES (1, 'e', '2026-01-01')")
        conn.execute("INSERT INTO run (id, name, tags, notes, experiment_id, status, source, config, resolved_config, "
                     "created_at, ingest_token_hash, run_dir) VALUES (1, 'r', '[]', '', 1, 'succeeded', 'external', "
                     "'{}', '{}', '2026-01-01', 'x', '/tmp')")
        for i, ex in enumerate((extras, {"acc": 1})):
            conn.execute("INSERT INTO sample (id, run_id, step, split, sample_index, prompt, response, tokens, extras, "
                         "wall_time) VALUES (?, 1, 1, 'train', ?, '', '', ?, ?, 0)",
                         (i + 1, i, json.dumps(record["tokens"]), json.dumps(ex)))
    alembic(db, "upgrade", "head")
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT num_turns, tool_names, tool_error, extras, turns, loss_mask FROM sample "
                            "ORDER BY id").fetchall()
    (turns_n, names, error, extras_after, turns, mask), single = rows
    assert (turns_n, names, error, json.loads(extras_after)) == (4, "|calculator|", 1, {"acc": 0})
    assert json.loads(turns)[1]["error_message"] == "division by zero" and json.loads(mask) == record["loss_mask"]
    assert single == (None, None, None, '{"acc": 1}', None, None)

    # downgrade keeps the conversations: back in the extras, from where the next upgrade lifts them again
    alembic(db, "downgrade", "0002")
    with sqlite3.connect(db) as conn:
        down = [json.loads(r[0]) for r in conn.execute("SELECT extras FROM sample ORDER BY id")]
    assert down[0] == {"acc": 0, "turns": json.loads(turns), "loss_mask": record["loss_mask"], "num_turns": 4}
    assert down[1] == {"acc": 1}
    alembic(db, "upgrade", "head")
    with sqlite3.connect(db) as conn:
        again = conn.execute("SELECT num_turns, tool_names, tool_error, extras, turns, loss_mask FROM sample "
                             "ORDER BY id").fetchall()
    assert [(r[:3], json.loads(r[3]), r[4] and json.loads(r[4]), r[5] and json.loads(r[5])) for r in again] == [
        ((4, "|calculator|", 1), {"acc": 0}, json.loads(turns), record["loss_mask"]),
        ((None, None, None), {"acc": 1}, None, None)]
