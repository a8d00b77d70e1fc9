"""Ids are never handed out twice (issue 35): delete the newest run (or experiment), create another, and it gets a
new id, not the deleted one (a bookmark or a script's saved id would point at another run). SQLite needs
AUTOINCREMENT (migration 0008, which rebuilds the two tables keeping every row); PostgreSQL's sequences never
reuse a value. Through the API, on a real SQLite file and on PostgreSQL."""
from __future__ import annotations

import sqlite3

import pytest
from fastapi.testclient import TestClient

from backend import db
from backend.app import create_app
from backend.settings import Settings
from tests.backend.conftest import DATABASES, external_run

API = "/api/v1"


def delete_run(client, run_id: int) -> None:
    assert client.post(f"{API}/runs/{run_id}/cancel").status_code == 200
    assert client.delete(f"{API}/runs/{run_id}").status_code == 204


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_a_deleted_runs_id_is_not_given_again(client):
    first, newest = external_run(client)["id"], external_run(client)["id"]
    delete_run(client, newest)
    again = external_run(client)["id"]
    assert again > newest, f"run {newest} was deleted and its id given to a new run"
    delete_run(client, again)
    delete_run(client, first)  # no run left at all
    assert external_run(client)["id"] > again
    experiment = client.post(f"{API}/experiments", json={"name": "to-delete"}).json()["id"]
    assert client.delete(f"{API}/experiments/{experiment}").status_code == 204
    assert client.post(f"{API}/experiments", json={"name": "next"}).json()["id"] > experiment


def test_migration_0008_keeps_every_row(tmp_path):
    """A database from before 0008 (runs with metrics, samples, a parent link) upgraded: the same rows, the same ids,
    foreign keys intact, and from then on a deleted run's id is not given again."""
    data = tmp_path / "data"
    settings = Settings(data_dir=data, dispatch=False, frontend_dir=tmp_path / "no-ui")
    with TestClient(create_app(settings)) as client:
        runs = [external_run(client, name=f"r{i}") for i in range(3)]
        for run in runs:
            token = {"Authorization": f"Bearer {run['ingest_token']}"}
            assert client.post(f"{API}/runs/{run['id']}/metrics", headers=token, json={
                "points": [{"key": "critic/score/mean", "step": s, "value": s / 10} for s in range(5)]}).status_code == 200
            assert client.post(f"{API}/runs/{run['id']}/samples", headers=token, json={
                "samples": [{"step": 1, "sample_index": 0, "response": "2"}]}).status_code == 200
        fork = client.post(f"{API}/runs/{runs[0]['id']}/fork", json={"launch": False}).json()
    path = data / "rlstudio.db"

    def snapshot() -> dict:
        with sqlite3.connect(path) as conn:
            return {table: conn.execute(f'SELECT * FROM "{table}" ORDER BY 1').fetchall()
                    for table in ("experiment", "run", "metric_point", "sample", "log_line", "event")}

    def autoincrement() -> set[str]:
        with sqlite3.connect(path) as conn:
            return {name for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
                    if "AUTOINCREMENT" in (sql or "")}

    url = f"sqlite:///{path}"
    from alembic import command

    command.downgrade(db.alembic_config(url), "0007")  # the schema as it was before
    assert not autoincrement() & {"run", "experiment"}
    before = snapshot()
    db.upgrade(url)
    assert {"run", "experiment"} <= autoincrement()
    assert snapshot() == before
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with TestClient(create_app(settings)) as client:
        assert client.get(f"{API}/runs/{fork['id']}").json()["parent_id"] == runs[0]["id"]
        assert client.get(f"{API}/runs/{runs[1]['id']}/samples").json()["count"] == 1
        delete_run(client, fork["id"])
        assert external_run(client)["id"] > fork["id"]
