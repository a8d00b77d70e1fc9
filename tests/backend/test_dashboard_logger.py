"""The engine's dashboard logger against a real server: a run started by hand, and a server killed with
SIGKILL mid-run then restarted -- every point and sample arrives exactly once."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import httpx

from tests.backend.conftest import HTTP_TIMEOUT, REPO, wait_for

STEPS, KEYS, SAMPLES = 60, 20, 8
KILL_AT, RESTART_AT = 10, 20  # the logging script holds at these steps until the test has acted

LOGGER_SCRIPT = textwrap.dedent(f"""
    import os, sys, time
    from engine.config import build_config
    from engine.loggers.dashboard import DashboardLogger

    url, spool, control = sys.argv[1], sys.argv[2], sys.argv[3]

    def wait_until(predicate, what):  # a state, with a generous timeout (the machine may be loaded)
        deadline = time.monotonic() + 300
        while not predicate():
            if time.monotonic() > deadline:
                sys.exit("timed out waiting for " + what)
            time.sleep(0.05)

    def signal_test(name):
        open(os.path.join(control, name), "w").close()

    def test_says(name):
        wait_until(lambda: os.path.exists(os.path.join(control, name)), name)

    cfg = build_config(overrides=["trainer.project_name=cli-project", "trainer.experiment_name=by-hand",
                                  "trainer.dashboard_url=" + url, "trainer.default_local_dir=" + spool])
    logger = DashboardLogger.from_config(cfg)
    logger.close_timeout = 60
    print("RUN", logger.run_id, flush=True)
    logger.log_status("running", total_steps={STEPS})
    for step in range(1, {STEPS} + 1):
        metrics = {{f"k/{{i}}": step * i for i in range({KEYS})}}
        metrics["training/global_step"] = step
        metrics["training/total_steps"] = {STEPS}
        metrics["actor/pg_loss"] = float("nan") if step == 7 else 0.5
        logger.log_metrics(step, metrics)
        logger.log_samples(step, [{{"step": step, "split": "train", "prompt_index": j, "group_uid": f"g{{j // 4}}",
                                   "prompt": f"q{{j}}", "response": f"a{{step}}-{{j}}", "score": j % 2,
                                   "reward": j % 2, "ground_truth": "1", "data_source": "arith",
                                   "tokens": ["x", "y"], "advantages": [0.1, 0.2], "acc": 1}}
                                  for j in range({SAMPLES})])
        logger.log_lines([f"step {{step}}"])
        if step == {KILL_AT}:  # the server has steps 1-{KILL_AT}; the test kills it now
            assert logger.flush(120), "steps 1-{KILL_AT} were not delivered"
            signal_test("delivered")
            test_says("server-killed")
        if step == {RESTART_AT}:  # steps after the kill are sent to a dead server: they go to the spool
            logger.flush(0)
            wait_until(lambda: logger.spooled > 0, "the spool")
            signal_test("spooled")
            test_says("server-restarted")
    logger.log_status("succeeded")
    logger.close()
    print("DELIVERED", logger.delivered, "SPOOLED", logger.spooled, flush=True)
""")


def test_logger_survives_server_kill9(server_factory, tmp_path):
    server = server_factory().start()
    script = tmp_path / "log_run.py"
    script.write_text(LOGGER_SCRIPT)
    spool = tmp_path / "spool"
    control = tmp_path / "control"
    control.mkdir()
    proc = subprocess.Popen([sys.executable, str(script), server.url, str(spool), str(control)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    line = proc.stdout.readline()
    while not line.startswith("RUN "):
        assert line, "the logger script ended before creating its run:\n" + "".join(seen)
        seen.append(line)
        line = proc.stdout.readline()
    run_id = int(line.split()[1])

    def script_says(name):
        wait_for(lambda: (control / name).exists() or proc.poll() is not None, 300, 0.05, name)
        assert (control / name).exists(), f"the logger script ended early:\n{proc.stdout.read()}"

    script_says("delivered")  # held at step KILL_AT with everything so far on the server
    assert httpx.get(f"{server.url}/api/v1/runs/{run_id}", timeout=HTTP_TIMEOUT).json()["progress_step"] == KILL_AT
    server.kill9()
    (control / "server-killed").touch()
    script_says("spooled")  # held at step RESTART_AT: the steps since the kill went to the spool
    server.start()
    (control / "server-restarted").touch()
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    spooled = int(out.split("SPOOLED")[1].split()[0])
    assert spooled > 0, f"the logger never had to spool; the kill did not happen mid-run?\n{out}"

    url = f"{server.url}/api/v1"
    run = httpx.get(f"{url}/runs/{run_id}", timeout=HTTP_TIMEOUT).json()
    assert run["status"] == "succeeded" and run["source"] == "external" and run["name"] == "by-hand"
    assert run["resolved_config"]["trainer"]["project_name"] == "cli-project"
    experiment = httpx.get(f"{url}/experiments/{run['experiment_id']}", timeout=HTTP_TIMEOUT).json()
    assert experiment["name"] == "cli-project"
    keys = httpx.get(f"{url}/runs/{run_id}/metrics/keys", timeout=HTTP_TIMEOUT).json()["data"]
    assert len(keys) == KEYS + 3
    series = httpx.get(f"{url}/runs/{run_id}/metrics", params={"max_points": 100_000}, timeout=HTTP_TIMEOUT).json()["data"]
    for s in series:
        assert s["steps"] == list(range(1, STEPS + 1)), s["key"]  # every step once, none twice
    by_key = {s["key"]: s for s in series}
    assert by_key["k/3"]["values"] == [float(step * 3) for step in range(1, STEPS + 1)]
    assert by_key["actor/pg_loss"]["values"][6] == "NaN"
    samples = httpx.get(f"{url}/runs/{run_id}/samples", params={"limit": 1000}, timeout=HTTP_TIMEOUT).json()
    assert samples["count"] == STEPS * SAMPLES
    positions = {(s["step"], s["sample_index"]) for s in samples["data"]}
    assert len(positions) == STEPS * SAMPLES
    assert {s["response"] for s in samples["data"]} == {f"a{t}-{j}" for t in range(1, STEPS + 1)
                                                        for j in range(SAMPLES)}
    assert samples["data"][0]["extras"] == {"acc": 1} and samples["data"][0]["advantages"] == [0.1, 0.2]
    logs = httpx.get(f"{url}/runs/{run_id}/logs", params={"limit": 1000}, timeout=HTTP_TIMEOUT).json()
    assert [x["text"] for x in logs["data"]] == [f"step {t}" for t in range(1, STEPS + 1)]
    assert not list(spool.rglob("*.jsonl")), "the spool is emptied once delivered"


def test_logger_refuses_other_runs_and_bad_server(server_factory, tmp_path):
    from engine.loggers.dashboard import DashboardLogger, create_run

    server = server_factory().start()
    run_a, token_a = create_run(server.url, {"project_name": "p", "experiment_name": "a"}, {})
    run_b, _ = create_run(server.url, {"project_name": "p", "experiment_name": "b"}, {})
    # run A's token used for run B: refused (403) and dropped, not retried forever
    wrong = DashboardLogger(server.url, run_b, token_a, str(tmp_path / "s"), quiet=True)
    wrong.log_metrics(1, {"x": 1.0})
    assert wrong.flush(10)
    wrong.close()
    assert httpx.get(f"{server.url}/api/v1/runs/{run_b}/metrics/keys", timeout=HTTP_TIMEOUT).json()["count"] == 0
    right = DashboardLogger(server.url, run_a, token_a, str(tmp_path / "s"), quiet=True)
    right.log_metrics(1, {"x": 1.0})
    assert right.flush(10)
    right.close()
    assert httpx.get(f"{server.url}/api/v1/runs/{run_a}/metrics/keys", timeout=HTTP_TIMEOUT).json()["data"] == ["x"]
