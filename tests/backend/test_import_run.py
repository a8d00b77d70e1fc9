"""Importing runs made elsewhere (backend/services/imports.py): verl's file-logger JSONL with its Hydra config and
generation dumps, and TensorBoard event files, through every path (the upload API, the command line into the
database and to a server), with files written by verl's own code (tests/verl_files.py). Bad files: a 422 naming
the field, the file and the line, and nothing stored."""
from __future__ import annotations

import math
import subprocess
import sys
import tracemalloc
from pathlib import Path

import httpx
import pytest
from sqlmodel import Session, select

from backend.imports.verl_metrics import Skipped, read_steps
from backend.models import Run, RunStatus
from backend.services import imports
from tests.backend.conftest import DATABASES, HTTP_TIMEOUT, external_run
from tests.backend.stored import stored
from tests.verl_files import (
    VAL_KEY,
    expected_value,
    same,
    verl_run,
    write_file_logger,
    write_generations,
    write_tensorboard,
)

API = "/api/v1"
REPO = Path(__file__).resolve().parents[2]
KEYS = ["critic/score/mean", "actor/pg_loss", "actor/entropy", "response_length/mean", VAL_KEY]


def files_of(run: dict) -> list[tuple[str, tuple[str, bytes]]]:
    parts = [("metrics", ("metrics.jsonl", run["metrics"].read_bytes())),
             ("config", ("config.yaml", run["config"].read_bytes()))]
    parts += [("rollout", (p.name, p.read_bytes())) for p in run["rollout"]]
    parts += [("validation", (p.name, p.read_bytes())) for p in run["validation"]]
    return parts


def series(client, run_id: int, key: str) -> dict[int, float | None]:
    body = client.get(f"{API}/metrics", params={"run_id": run_id, "key": key}).json()["data"][0]
    return {s: (math.nan if v == "NaN" else v) for s, v in zip(body["steps"], body["values"])}


def check_imported(client, run_id: int, steps: int = 6) -> None:
    """Every number, the config and every answer as verl wrote them."""
    run = client.get(f"{API}/runs/{run_id}").json()
    assert (run["status"], run["source"], run["progress_step"]) == ("succeeded", "import", steps)
    assert run["progress_total"] == 6  # the config's trainer.total_training_steps
    for key in KEYS:
        got = series(client, run_id, key)
        want = {s: expected_value(s, key) for s in range(1, steps + 1) if expected_value(s, key) is not None}
        assert got.keys() == want.keys(), key
        assert all(same(got[s], want[s]) for s in want), (key, got, want)
    assert math.isnan(series(client, run_id, "actor/pg_loss")[3])  # verl wrote NaN as null
    # the config, its interpolation resolved
    rollout = run["config"]["actor_rollout_ref"]["rollout"]
    assert rollout == {"name": "vllm", "n": 2, "response_length": 256}
    assert run["name"] == "qwen_gsm8k_grpo"  # trainer.experiment_name
    # the answers: 6 per training step (3 prompts x 2), 2 per validation
    counts = {(s["step"], s["split"]): s["count"] for s in client.get(f"{API}/runs/{run_id}/samples/steps").json()["data"]}
    assert counts == {**{(s, "train"): 6 for s in range(1, steps + 1)}, (0, "val"): 2, (steps, "val"): 2}
    answers = client.get(f"{API}/runs/{run_id}/samples", params={"step": 2, "split": "train"}).json()["data"]
    first = min(answers, key=lambda s: s["sample_index"])
    assert "What is 0 + 0?" in first["prompt"] and first["ground_truth"] == "0"
    assert first["score"] == 1.0 and first["extras"] == {"acc": True, "pred": "0"}
    assert first["response"] == "0 + 0 = 0. #### 0"
    # a GRPO group: the two answers to one prompt share a group
    assert len({s["group_uid"] for s in answers}) == 3


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_verl_upload_makes_a_run_with_metrics_config_and_answers_beside_an_rlstudio_run(client, tmp_path):
    files = verl_run(tmp_path / "verl")
    response = client.post(f"{API}/imports/verl", files=files_of(files),
                           data={"experiment": "gsm8k", "tags": ["verl", "baseline"]})
    assert response.status_code == 201, response.text
    body = response.json()
    run_id = body["run"]["id"]
    assert body["steps"] == 6 and body["samples"] == {"train": 36, "val": 4} and body["skipped_values"] == {}
    check_imported(client, run_id)
    assert body["run"]["tags"] == ["verl", "baseline"]
    # beside an rlstudio run: the runs list (held-out score from verl's val-core key) and the Compare page's query
    ours = external_run(client)
    assert client.post(f"{API}/runs/{ours['id']}/metrics", headers={"Authorization": f"Bearer {ours['ingest_token']}"},
                       json={"series": [{"key": "critic/score/mean", "steps": [1, 2], "values": [0.3, 0.4]}]}
                       ).status_code == 200
    listed = {r["id"]: r for r in client.get(f"{API}/runs").json()["data"]}
    assert listed[run_id]["val_score_key"] == VAL_KEY and same(listed[run_id]["val_score"], 0.5)
    both = client.get(f"{API}/metrics", params={"run_id": [ours["id"], run_id], "key": "critic/score/mean"}).json()
    assert {s["run_id"]: len(s["steps"]) for s in both["data"]} == {ours["id"]: 2, run_id: 6}


def test_tensorboard_upload_reads_verls_tensorboard_logger(client, tmp_path):
    events = write_tensorboard(tmp_path / "tb", steps=5)
    response = client.post(f"{API}/imports/tensorboard", files=[("events", (p.name, p.read_bytes())) for p in events],
                           data={"name": "tb-run"})
    assert response.status_code == 201, response.text
    run_id = response.json()["run"]["id"]
    assert response.json()["run"]["name"] == "tb-run"
    for key in ("critic/score/mean", "actor/entropy", VAL_KEY):
        got = series(client, run_id, key)
        want = {s: expected_value(s, key, None) for s in range(1, 6) if expected_value(s, key, None) is not None}
        assert got.keys() == want.keys() and all(math.isclose(got[s], want[s], rel_tol=1e-6) for s in want), key


def test_a_repeated_step_keeps_its_last_line_and_elapsed_seconds_is_the_wall_time(client, tmp_path):
    """Two verl files one after the other (a resumed run: verl 0.9.1 starts the file anew) repeat a step; newer
    verl's `elapsed_seconds` (a line in its format, appended) gives the points their spacing in time."""
    first = write_file_logger(tmp_path / "a.jsonl", steps=3).read_bytes()
    second = write_file_logger(tmp_path / "b.jsonl", steps=4, nan_at=None).read_bytes()
    newer = b'{"step": 5, "elapsed_seconds": 100.0, "data": {"critic/score/mean": 0.9}}\n' \
            b'{"step": 6, "elapsed_seconds": 160.5, "data": {"critic/score/mean": 1.0}}\n'
    response = client.post(f"{API}/imports/verl", files=[("metrics", ("joined.jsonl", first + second + newer))])
    assert response.status_code == 201, response.text
    run_id = response.json()["run"]["id"]
    assert response.json()["steps"] == 6 and response.json()["lines"] == 9
    pg = series(client, run_id, "actor/pg_loss")
    assert not math.isnan(pg[3]) and same(pg[3], -0.03)  # the second file's step 3 (finite) won over the NaN
    body = client.get(f"{API}/metrics", params={"run_id": run_id, "key": "critic/score/mean"}).json()["data"][0]
    walls = dict(zip(body["steps"], body["wall_times"]))
    assert walls[6] - walls[5] == pytest.approx(60.5)


BAD = [  # (what, field, file name, content, the message must contain)
    ("a line that is not JSON", "metrics", "metrics.jsonl", b'{"step": 1, "data": {}}\n{"step": 2, data}\n',
     "metrics.jsonl line 2: not JSON"),
    ("no step", "metrics", "metrics.jsonl", b'{"step": 1, "data": {}}\n\n{"data": {"a": 1}}\n',
     'metrics.jsonl line 3: no "step"'),
    ("a step that is text", "metrics", "m.jsonl", b'{"step": "7", "data": {}}\n', 'm.jsonl line 1: "step" is 7'),
    ("data not an object", "metrics", "m.jsonl", b'{"step": 1, "data": [1, 2]}\n', 'm.jsonl line 1: "data" is a JSON list'),
    ("a JSON array line", "metrics", "m.jsonl", b'[1, 2]\n', "m.jsonl line 1: a JSON list, not an object"),
    ("not UTF-8", "metrics", "m.jsonl", b'{"step": 1, "data": {}}\n{"step": 2, "data": {"\xff": 1}}\n',
     "m.jsonl line 2: not UTF-8"),
    ("an empty file", "metrics", "m.jsonl", b"", "m.jsonl: no lines"),
    ("a dump line without output", "rollout", "4.jsonl", b'{"input": "q", "score": 1.0, "step": 4}\n',
     '4.jsonl line 1: no "output"'),
    ("a dump score that is text", "validation", "2.jsonl", b'{"input": "q", "output": "a", "score": "high", "step": 2}\n',
     '2.jsonl line 1: "score" is high, not a number'),
    ("a config that is not YAML", "config", "config.yaml", b"trainer:\n  total_training_steps: 3\n  logger: [a, b\n",
     "config.yaml line 4: not YAML"),
    ("a config that is a list", "config", "config.yaml", b"- 1\n- 2\n", "not a mapping"),
]


@pytest.mark.parametrize("what, field, name, content, message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_file_is_a_422_naming_the_field_and_line_and_stores_nothing(client, settings, tmp_path, what, field,
                                                                         name, content, message):
    good = write_file_logger(tmp_path / "metrics.jsonl", steps=3)
    parts = [(field, (name, content))] + ([("metrics", ("metrics.jsonl", good.read_bytes()))]
                                          if field != "metrics" else [])
    before = stored(client)
    response = client.post(f"{API}/imports/verl", files=parts, data={"experiment": "never-made"})
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", field] and message in error["msg"], error
    assert stored(client) == before  # not a row, not a feed event


@pytest.mark.parametrize("database", DATABASES, indirect=True)
def test_a_failure_while_storing_removes_the_half_run(client, settings, tmp_path, monkeypatch):
    """A failure after some batches were stored (here: the answers' ingest raising) deletes the run, its points,
    and the experiment the import made; the server goes on."""
    files = verl_run(tmp_path / "verl")
    monkeypatch.setattr(imports, "POINTS_PER_BATCH", 7)  # several metric batches are committed first

    def broken(**_kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(imports.samples, "ingest", broken)
    before = rows(client)
    with pytest.raises(OSError):
        client.post(f"{API}/imports/verl", files=files_of(files), data={"experiment": "half"})
    assert rows(client) == before
    assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize("content_type, body", [("application/json", b'{"metrics": "x"}'), ("text/plain", b"x"),
                                                (None, b"x")])
def test_a_body_that_is_not_multipart_is_a_422_naming_the_body(client, content_type, body):
    headers = {"Content-Type": content_type} if content_type else {}
    response = client.post(f"{API}/imports/verl", content=body, headers=headers)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "body"], response.text
    assert "multipart/form-data" in response.json()["detail"][0]["msg"]


@pytest.mark.parametrize("content_type, body, field, message", [
    ("multipart/form-data", b"xx", "body", "Missing boundary"),
    ("multipart/form-data; boundary=abc",
     b'--abc\r\nContent-Disposition: form-data; name="metrics"\r\n\r\n{"step": 1, "data": {}}\r\n--abc--\r\n',
     "metrics", "a file part"),
], ids=["no boundary", "metrics as a text field"])
def test_a_malformed_multipart_body_is_a_422(client, content_type, body, field, message):
    response = client.post(f"{API}/imports/verl", content=body, headers={"Content-Type": content_type})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", field] and message in response.json()["detail"][0]["msg"]


def test_missing_metrics_and_bad_fields_are_named(client, tmp_path):
    response = client.post(f"{API}/imports/verl", files=[("rollout", ("1.jsonl", b"{}"))])
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "metrics"]
    good = write_file_logger(tmp_path / "m.jsonl", 2).read_bytes()
    response = client.post(f"{API}/imports/verl", files=[("metrics", ("m.jsonl", good))], data={"tags": "x" * 101})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "tags"]
    response = client.post(f"{API}/imports/tensorboard", files=[("events", ("events.out.tfevents.1", b"not events"))])
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "events"]
    assert "events.out.tfevents.1: no scalar summaries" in response.json()["detail"][0]["msg"]


def test_an_interrupted_import_is_marked_failed_at_the_next_start(settings, tmp_path):
    from fastapi.testclient import TestClient

    from backend.app import create_app

    app = create_app(settings)
    with Session(app.state.engine) as session:  # what an import killed mid-way leaves: its run still running
        run, _ = imports._new_run(session, settings.runs_dir, imports.Target(name="cut"), {}, {})
        run_id = run.id
    with TestClient(app) as client:
        run = client.get(f"{API}/runs/{run_id}").json()
    assert run["status"] == "failed" and "The import stopped before it finished" in run["error"]


def test_an_import_in_progress_is_not_judged_stalled(client, settings):
    """An import's points carry its source run's wall times (TensorBoard's: weeks old, maybe) and its answers may
    take minutes after the last point: the stall check, which judges against the clock, leaves it alone."""
    from backend.models import MetricsIngest
    from backend.services import metrics
    from backend.services.health.store import refresh_stalled

    from backend.services.health.store import HEALTH_CHECKS

    with Session(client.app.state.engine, expire_on_commit=False) as session:
        session.info[HEALTH_CHECKS] = True  # as the server's sessions have it
        run, _ = imports._new_run(session, settings.runs_dir, imports.Target(name="importing"), {}, {})
        old = 1_000_000_000.0  # 2001: a step every 10 s, then nothing
        for batch in range(5):  # the import's batches: each tells the stall check a step time
            steps = [2 * batch + 1, 2 * batch + 2]
            metrics.ingest(session=session, run=run, body=MetricsIngest(series=[
                {"key": "critic/score/mean", "steps": steps, "values": [0.1, 0.1],
                 "wall_times": [old + 10 * s for s in steps]}]))
        assert refresh_stalled(session, run) is None
    assert client.get(f"{API}/runs/{run.id}/health").json()["alarms"] == []


def test_the_reader_streams_a_large_file(tmp_path):
    """Memory while reading is one line, not the file: tracemalloc's peak over a ~5.5 MB file stays under 1 MB."""
    path = write_file_logger(tmp_path / "big.jsonl", steps=1)
    line = path.read_bytes()
    with path.open("ab") as out:
        for step in range(2, 20_000):
            out.write(line.replace(b'"step":1,', f'"step":{step},'.encode()))
    assert path.stat().st_size > 5_000_000
    tracemalloc.start()
    try:
        with path.open("rb") as stream:
            count = sum(1 for _ in read_steps(stream, path.name, Skipped()))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 19_999
    assert peak < 1_000_000, peak


def rows(client) -> dict[str, list]:
    """The tables a run's data lives in (the feed keeps its run-created and run-deleted events, as for any run)."""
    from sqlalchemy import text

    with client.app.state.engine.connect() as conn:
        return {table: conn.execute(text(f"SELECT * FROM {table} ORDER BY 1")).all()
                for table in ("run", "experiment", "metric_point", "metric_bucket", "sample", "health_state")}


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend.import_run", *args], check=False, cwd=REPO, capture_output=True,
                          text=True, timeout=300, env=env)


def test_cli_into_the_database_finds_the_hydra_config_beside_the_file(tmp_path):
    files = verl_run(tmp_path / "verl")
    data = tmp_path / "data"
    done = _cli("verl", str(files["metrics"]), "--rollout-dir", str(tmp_path / "verl" / "rollout"),
                "--validation-dir", str(tmp_path / "verl" / "validation"), "--data-dir", str(data),
                "--experiment", "gsm8k")
    assert done.returncode == 0, done.stderr
    assert "6 steps" in done.stdout and "36 train, 4 val" in done.stdout
    from fastapi.testclient import TestClient

    from backend.app import create_app
    from backend.settings import Settings

    with TestClient(create_app(Settings(data_dir=data, dispatch=False, frontend_dir=tmp_path / "no-ui"))) as client:
        (run,) = client.get(f"{API}/runs").json()["data"]
        check_imported(client, run["id"])


def test_cli_refuses_a_bad_file_naming_the_line_and_stores_nothing(tmp_path):
    path = write_file_logger(tmp_path / "metrics.jsonl", steps=4)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2]) + b'{"step": 3, "data": {"a": 1}\n' + b"".join(lines[3:]))
    data = tmp_path / "data"
    done = _cli("verl", str(path), "--data-dir", str(data))
    assert done.returncode == 2
    assert "metrics.jsonl line 3: not JSON" in done.stderr and "nothing was stored" in done.stderr
    from sqlalchemy import create_engine

    engine = create_engine(f"sqlite:///{data / 'rlstudio.db'}")
    with Session(engine) as session:
        assert session.exec(select(Run)).all() == []
    engine.dispose()


def test_cli_uploads_to_a_server(server_factory, tmp_path):
    server = server_factory().start()
    verl = verl_run(tmp_path / "verl")
    events = write_tensorboard(tmp_path / "tb", steps=3)
    done = _cli("verl", str(verl["metrics"]), "--rollout-dir", str(tmp_path / "verl" / "rollout"),
                "--validation-dir", str(tmp_path / "verl" / "validation"), "--url", server.url)
    assert done.returncode == 0, done.stderr
    assert f"{server.url}/runs/" in done.stdout
    done = _cli("tensorboard", str(tmp_path / "tb"), "--url", server.url, "--name", "from-tb")
    assert done.returncode == 0, done.stderr
    runs = httpx.get(f"{server.url}{API}/runs", timeout=HTTP_TIMEOUT).json()["data"]
    assert sorted(r["name"] for r in runs) == ["from-tb", "qwen_gsm8k_grpo"]
    assert all(r["status"] == RunStatus.succeeded.value and r["source"] == "import" for r in runs)
    with httpx.Client(base_url=server.url, timeout=HTTP_TIMEOUT) as client:
        check_imported(client, next(r["id"] for r in runs if r["name"] == "qwen_gsm8k_grpo"))
    # a bad dump through the server: exit 2, the line named, nothing more stored
    write_generations(tmp_path / "bad", 1).write_text('{"input": "q"}\n')
    done = _cli("verl", str(verl["metrics"]), "--rollout-dir", str(tmp_path / "bad"), "--url", server.url)
    assert done.returncode == 2 and "1.jsonl line 1: no \"output\"" in done.stderr, done.stderr
    assert len(httpx.get(f"{server.url}{API}/runs", timeout=HTTP_TIMEOUT).json()["data"]) == 2
    assert len(events) == 1


def _peak_rss(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.slow  # ~1 min on this machine: 200 MB through a real server, twice read
def test_a_large_upload_is_streamed_not_held_in_memory(server_factory, tmp_path):
    """~200 MB through the command line's upload (httpx streams the file) to a real server: the server's peak
    memory grows by far less than the file (Starlette spools the part to disk, the readers go a line at a time).
    Each line carries a 10 KB string verl would not log (left out, counted), so little is stored."""
    server = server_factory().start()
    path = write_file_logger(tmp_path / "metrics.jsonl", steps=1)
    filler = "x" * 10_000
    with path.open("ab") as out:
        for step in range(2, 20_001):
            out.write(b'{"step":%d,"data":{"critic/score/mean":0.5,"note":"%s"}}\n' % (step, filler.encode()))
    size = path.stat().st_size
    assert size > 190_000_000
    before = _peak_rss(server.process.pid)
    done = _cli("verl", str(path), "--url", server.url, "--name", "large")
    assert done.returncode == 0, done.stderr
    assert "20000 steps" in done.stdout and '"note": 19999' in done.stdout
    grew = _peak_rss(server.process.pid) - before
    print(f"server peak memory +{grew / 2**20:.1f} MiB for a {size / 2**20:.0f} MiB upload")
    assert grew < size / 4, f"the server's peak memory grew by {grew / 2**20:.0f} MiB for a {size / 2**20:.0f} MiB file"
