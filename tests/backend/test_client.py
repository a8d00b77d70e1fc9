"""`backend.client` against a real server subprocess on a real SQLite file: the runs that need no Ray are
recorded (`launch=False`) and fed through the ingest API as the dashboard logger does; the sweeps launch
real Ray jobs of the tests' tiny trainer (tests/backend/jobs/tiny_trainer.py)."""
from __future__ import annotations

import json
import math
import re
import subprocess

import httpx
import pandas as pd
import pytest

from backend.client import ApiError, Client, RunFailed, WaitTimeout, format_table, parse_grid
from backend.client.sweep import combinations, short_names, split_top_level
from tests.backend.conftest import HTTP_TIMEOUT, PY, REPO, Server
from tests.backend.test_dispatch import dispatch_env
from tests.verl_files import verl_run, write_tensorboard

TOKEN = "client-test-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for this module's tests without Ray (runs stay queued), with an API token."""
    server = Server(tmp_path_factory.mktemp("client") / "data",
                    env={"RLSTUDIO_DISPATCH": "false", "RLSTUDIO_API_TOKEN": TOKEN}).start()
    yield server
    server.stop()


@pytest.fixture
def client(server, monkeypatch):
    monkeypatch.delenv("RLSTUDIO_URL", raising=False)
    monkeypatch.delenv("RLSTUDIO_API_TOKEN", raising=False)
    with Client(server.url, token=TOKEN) as c:
        yield c


def recorded_run(client: Client, name: str, experiment: str, overrides=("trainer.total_training_steps=3",)):
    """A run driven from outside (as a command started by hand with the dashboard logger)."""
    run = client.launch(list(overrides), name=name, experiment=experiment, launch=False)
    assert run.ingest_token and run.status.value == "running"
    return run


def ingest(url: str, run, path: str, body: dict) -> None:
    response = httpx.post(f"{url}/api/v1/runs/{run.id}/{path}", json=body, timeout=HTTP_TIMEOUT,
                          headers={"Authorization": f"Bearer {run.ingest_token}"})
    assert response.status_code == 200, response.text


def report(url: str, run, status: str, error: str | None = None) -> None:
    ingest(url, run, "status", {"status": status, "error": error})


def test_token_from_the_environment_and_errors_name_the_field(server, client, monkeypatch):
    with Client(server.url) as anonymous, pytest.raises(ApiError) as refused:
        anonymous.experiments()
    assert refused.value.status_code == 401 and "Authorization" in str(refused.value)
    monkeypatch.setenv("RLSTUDIO_URL", server.url)
    monkeypatch.setenv("RLSTUDIO_API_TOKEN", TOKEN)
    with Client() as from_env:
        assert from_env.url == server.url
        from_env.create_experiment("from-env", description="made with the environment's url and token")
        assert [e.description for e in from_env.experiments(q="from-env")] == [
            "made with the environment's url and token"]

    before = len(client.runs())
    with pytest.raises(ApiError) as bad_key:
        client.launch(["actor_rollout_ref.actor.optim.lrr=1e-4"], name="typo")
    assert bad_key.value.status_code == 422 and bad_key.value.field == "actor_rollout_ref.actor.optim.lrr"
    assert "actor_rollout_ref.actor.optim.lr" in str(bad_key.value)  # the suggestion
    with pytest.raises(ApiError) as bad_value:
        client.validate(["data.train_batch_size=lots"])
    assert bad_value.value.field == "data.train_batch_size" and "integer" in str(bad_value.value)
    with pytest.raises(ApiError) as no_experiment:
        client.launch([], experiment=987654)
    assert no_experiment.value.field == "experiment_id" and "does not exist" in str(no_experiment.value)
    with pytest.raises(ApiError) as no_run:
        client.run(987654)
    assert no_run.value.status_code == 404
    with pytest.raises(ApiError) as taken:
        client.create_experiment("from-env")
    assert taken.value.status_code == 409 and "already exists" in str(taken.value)
    assert len(client.runs()) == before  # nothing refused was recorded


def test_runs_metrics_samples_and_downloads(server, client, tmp_path):
    run = recorded_run(client, "reader", "reading", ["trainer.total_training_steps=3", "algorithm.adv_estimator=grpo",
                                                   "actor_rollout_ref.rollout.n=4"])
    other = recorded_run(client, "other", "reading")
    ingest(server.url, run, "metrics", {"points": [
        {"key": "critic/score/mean", "step": s, "value": v} for s, v in ((1, 0.25), (2, 0.5), (3, 0.75))] + [
        {"key": "actor/pg_loss", "step": 1, "value": 0.5}, {"key": "actor/pg_loss", "step": 2, "value": "NaN"}]})
    ingest(server.url, other, "metrics", {"points": [{"key": "critic/score/mean", "step": 1, "value": 0.1}]})
    ingest(server.url, run, "samples", {"samples": [
        {"step": 2, "split": "train", "sample_index": i, "prompt_index": i, "prompt": f"{i}+2=",
         "response": f"{i + 2}\nmore", "score": float(i % 2), "data_source": "arith", "tokens": ["a", "b"],
         "advantages": [0.5, 1.5]} for i in range(4)]})

    assert client.metric_keys(run.id) == ["actor/pg_loss", "critic/score/mean"]
    assert client.latest(run.id) == {"actor/pg_loss": pytest.approx(math.nan, nan_ok=True),
                                     "critic/score/mean": 0.75}
    (score,) = client.metrics(run.id, ["critic/score/mean"])
    assert score.steps == [1, 2, 3] and score.values == [0.25, 0.5, 0.75] and not score.downsampled
    loss = {r["step"]: r["value"] for r in client.metric_rows(run.id, ["actor/pg_loss"])}
    assert loss[1] == 0.5 and math.isnan(loss[2])
    wide = client.metrics_df(run.id)
    assert list(wide.columns) == ["actor/pg_loss", "critic/score/mean"] and list(wide.index) == [1, 2, 3]
    assert wide.loc[3, "critic/score/mean"] == 0.75 and math.isnan(wide.loc[3, "actor/pg_loss"])
    both = client.metrics_df([run.id, other.id], ["critic/score/mean"])
    assert both.loc[(other.id, 1), "critic/score/mean"] == 0.1 and len(both) == 4
    assert len(client.metrics_df(run.id, wide=False)) == 5

    assert [(s.step, s.count, s.mean_score) for s in client.sample_steps(run.id)] == [(2, 4, 0.5)]
    answers = client.samples(run.id, step=2, min_score=1.0)
    assert [(s.prompt_index, s.response) for s in answers] == [(1, "3\nmore"), (3, "5\nmore")]
    assert len(client.samples(run.id, limit=3)) == 3
    rows = client.sample_rows(run.id, steps=[2])
    assert [(r.first_line, r.length, r.advantage) for r in rows][:2] == [("2", 2, 1.0), ("3", 2, 1.0)]
    frame = client.samples_df(run.id)
    assert frame["score"].tolist() == [0.0, 1.0, 0.0, 1.0] and frame["prompt"][3] == "3+2="

    csv = client.download_metrics(run.id, tmp_path / "m.csv")
    assert pd.read_csv(csv)["critic/score/mean"].tolist() == [0.25, 0.5, 0.75]
    parquet = client.download_metrics(run.id, tmp_path / "long.parquet", format="parquet", layout="long")
    assert len(pd.read_parquet(parquet)) == 5
    jsonl = client.download_samples(run.id, tmp_path / "s.jsonl", min_score=1.0)
    assert [json.loads(line)["response"] for line in jsonl.read_text().splitlines()] == ["3\nmore", "5\nmore"]
    with pytest.raises(ApiError) as bad_format:
        client.download_samples(run.id, tmp_path / "s.xml", format="xml")
    assert bad_format.value.status_code == 422 and bad_format.value.field == "format"

    assert [r.name for r in client.runs(experiment="reading", sort="id")] == ["reader", "other"]
    assert [r.id for r in client.runs(config={"algorithm.adv_estimator": "grpo"}, experiment="reading")] == [run.id]
    client.update_run(run.id, tags=["keep"], notes="the one with samples")
    assert [r.id for r in client.runs(tag="keep")] == [run.id]
    fork = client.fork(run.id, ["trainer.total_training_steps=5"], name="longer", launch=False)
    assert fork.parent_id == run.id and fork.config["trainer"]["total_training_steps"] == 5
    assert fork.config["algorithm"]["adv_estimator"] == "grpo"


def test_wait_returns_ends_and_raises_for_failures(server, client):
    ok = recorded_run(client, "ok", "waiting")
    bad = recorded_run(client, "bad", "waiting")
    stopped = recorded_run(client, "stopped", "waiting")
    with pytest.raises(WaitTimeout) as still_running:  # nothing ends these runs but this test
        client.wait([ok, bad], timeout=0.3, poll=0.1)
    assert [r.status.value for r in still_running.value.runs] == ["running", "running"]
    report(server.url, ok, "succeeded")
    assert client.wait(ok).status.value == "succeeded"
    report(server.url, bad, "failed", error="ValueError: reward function returned None")
    with pytest.raises(RunFailed) as failed:
        client.wait([ok, bad], poll=0.1)
    assert failed.value.run.id == bad.id and "failed: ValueError: reward function returned None" in str(failed.value)
    assert client.cancel(stopped.id).status.value == "cancelled"
    done = client.wait([ok, bad, stopped], check=False)
    assert [r.status.value for r in done] == ["succeeded", "failed", "cancelled"]
    with pytest.raises(ApiError) as again:
        client.cancel(stopped.id)
    assert again.value.status_code == 409 and "already cancelled" in str(again.value)
    with pytest.raises(ApiError) as no_checkpoint:
        client.resume(ok.id)
    assert no_checkpoint.value.status_code == 409 and "no checkpoint" in str(no_checkpoint.value)
    client.delete_run(bad.id)
    assert [r.name for r in client.runs(experiment="waiting", sort="id")] == ["ok", "stopped"]


def test_grid_parsing():
    grid, fixed = parse_grid(["actor_rollout_ref.actor.optim.lr=1e-4,3e-4", "trainer.logger=[console,file]",
                              "critic.optim.lr=1e-5,1e-4", "trainer.total_training_steps=10"])
    assert grid == {"actor_rollout_ref.actor.optim.lr": ["1e-4", "3e-4"], "critic.optim.lr": ["1e-5", "1e-4"]}
    assert fixed == ["trainer.logger=[console,file]", "trainer.total_training_steps=10"]
    assert combinations({"a": ["1", "2"], "b": ["x", "y"]}) == [
        {"a": "1", "b": "x"}, {"a": "1", "b": "y"}, {"a": "2", "b": "x"}, {"a": "2", "b": "y"}]
    assert short_names(list(grid)) == {"actor_rollout_ref.actor.optim.lr": "actor.optim.lr",
                                       "critic.optim.lr": "critic.optim.lr"}
    assert short_names(["data.train_batch_size", "actor_rollout_ref.rollout.n"]) == {
        "data.train_batch_size": "train_batch_size", "actor_rollout_ref.rollout.n": "n"}
    assert split_top_level("'a,b',[1,2],{x: 1, y: 2}") == ["'a,b'", "[1,2]", "{x: 1, y: 2}"]
    for bad in ("lr", "=1", "x=1,,2"):
        with pytest.raises(ValueError):
            parse_grid([bad])
    assert format_table([{"run": 1, "lr": 0.0001, "val": None}, {"run": 12, "lr": 0.0003, "val": 0.5}]) == (
        "run  lr      val\n---  ------  ---\n1    0.0001  -\n12   0.0003  0.5")


def cli(url: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "backend.client", "--url", url, "--token", TOKEN, *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_sweep_command_validates_everything_before_launching(server, client):
    refused = cli(server.url, "sweep", "--experiment", "cli", "--no-wait",
                  "actor_rollout_ref.actor.optim.lr=1e-4,lots", "trainer.total_training_steps=3")
    assert refused.returncode == 2 and "actor_rollout_ref.actor.optim.lr" in refused.stderr
    assert "Traceback" not in refused.stderr
    with pytest.raises(ApiError):
        client.experiment("cli")  # nothing was made
    launched = cli(server.url, "sweep", "--experiment", "cli", "--no-wait", "--tag", "grid",
                   "actor_rollout_ref.actor.optim.lr=1e-4,3e-4", "actor_rollout_ref.rollout.n=2,4",
                   "trainer.total_training_steps=3")
    assert launched.returncode == 0, launched.stderr
    runs = client.runs(experiment="cli", sort="id")
    assert [r.name for r in runs] == ["lr=1e-4,n=2", "lr=1e-4,n=4", "lr=3e-4,n=2", "lr=3e-4,n=4"]
    assert all(r.status.value == "queued" and r.tags == ["grid"] for r in runs)  # this server dispatches nothing
    assert [(r.resolved_config["actor_rollout_ref"]["actor"]["optim"]["lr"],
             r.resolved_config["actor_rollout_ref"]["rollout"]["n"]) for r in runs] == [
        (1e-4, 2), (1e-4, 4), (3e-4, 2), (3e-4, 4)]
    table = cli(server.url, "results", "--experiment", "cli", "--key", "actor_rollout_ref.actor.optim.lr")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["run", "name", "lr", "status", "step"]
    assert [line.split()[1:4] for line in lines[2:]] == [
        ["lr=1e-4,n=2", "0.0001", "queued"], ["lr=1e-4,n=4", "0.0001", "queued"],
        ["lr=3e-4,n=2", "0.0003", "queued"], ["lr=3e-4,n=4", "0.0003", "queued"]]
    for run in runs:
        client.cancel(run.id)


def readme_script() -> str:
    text = (REPO / "docs" / "automation.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    (script,) = [b for b in blocks if "from backend.client import Client" in b]
    return script


@pytest.mark.ray
@pytest.mark.slow  # five Ray jobs one after another (~45 s here); the fast tier has the client on recorded runs
def test_readme_sweep_script_and_sweep_command_on_real_jobs(server_factory, ray_head):
    """docs/automation.md's ten-line sweep, as written but for its length (3 steps), against a server that launches
    Ray jobs; then the shell's sweep with one run failing on purpose."""
    server = server_factory(env=dispatch_env(ray_head, RLSTUDIO_MAX_CONCURRENT_RUNS="3",
                                             RLSTUDIO_API_TOKEN=TOKEN)).start()
    server.wait_dispatch_ready()
    script = readme_script()
    assert "trainer.total_training_steps=300" in script
    script = script.replace("trainer.total_training_steps=300", "trainer.total_training_steps=3")
    env = {"PATH": "/usr/bin:/bin", "RLSTUDIO_URL": server.url, "RLSTUDIO_API_TOKEN": TOKEN}
    done = subprocess.run([PY, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    # the tiny trainer's held-out score is 1000 x its learning rate: each run got its own override
    assert done.stdout.splitlines() == ["lr=3e-5: succeeded, held-out accuracy 0.030",
                                        "lr=1e-4: succeeded, held-out accuracy 0.100",
                                        "lr=3e-4: succeeded, held-out accuracy 0.300"]

    swept = cli(server.url, "sweep", "--experiment", "cli-real", "--poll", "0.3", "--preset", "demo",
                "+trainer.tiny_fail=false,true", "actor_rollout_ref.actor.optim.lr=2e-4",
                "trainer.total_training_steps=2", timeout=300)
    assert swept.returncode == 1, swept.stderr  # one run failed
    lines = swept.stdout.splitlines()
    assert lines[0].startswith("launched 2 runs into experiment 'cli-real'")
    assert lines[1].split() == ["run", "name", "tiny_fail", "status", "step", "val-core/arith/reward/mean@1",
                                "critic/score/mean", "error"]
    assert [line.split()[1:7] for line in lines[3:]] == [["tiny_fail=false", "False", "succeeded", "2", "0.2", "1"],
                                                         ["tiny_fail=true", "True", "failed", "2", "0.2", "1"]]


def test_imports_from_python(client, tmp_path):
    """Client.import_verl / import_tensorboard: the files streamed from disk, the run made; a bad file is an
    ApiError naming its field and line, and nothing is made."""
    files = verl_run(tmp_path / "verl", steps=4)
    made = client.import_verl(files["metrics"], config=files["config"], rollout=files["rollout"],
                              validation=files["validation"], experiment="imports", tags=["verl"])
    assert (made.steps, made.run.source, made.run.tags) == (4, "import", ["verl"])
    assert made.samples == {"train": 4 * 6, "val": 2 * 2}  # 3 prompts x 2 answers a step; 2 validations of 2
    assert client.metric_keys(made.run.id) and client.sample_steps(made.run.id)
    tb = client.import_tensorboard(write_tensorboard(tmp_path / "tb", steps=3), name="tb-run")
    assert (tb.run.name, tb.steps) == ("tb-run", 3)
    before = len(client.runs(limit=None))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(files["metrics"].read_text().splitlines()[0] + "\n{not json\n")
    with pytest.raises(ApiError) as refused:
        client.import_verl(bad)
    assert refused.value.status_code == 422 and refused.value.field == "metrics"
    assert "bad.jsonl line 2" in str(refused.value.detail)
    assert len(client.runs(limit=None)) == before
