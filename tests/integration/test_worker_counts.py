"""The same run on 1 and on 2 workers (FSDP2 over gloo here; the same code runs over NCCL on GPUs): equal
losses and gradient norms step by step, and a checkpoint saved by 2 workers resumes on 1 and on 2; and the
2 workers on two Ray nodes (trainer.nnodes=2, simulated on this machine) land one per node with the same numbers.
The one-worker runs train in the test's engine process (`ray_init.mode=in_process`: no Ray of their own to start;
tests/integration/test_in_process.py shows in-process and one Ray worker give the same losses), so what is compared
is the world size; the two-worker runs go through Ray.

The rollout is greedy and the advantage estimator GAE (n=1), so both runs see the same responses, and one
mini-batch per step, so both update on the same rows; what remains is the loss arithmetic, which must not
depend on how the batch is split over workers and micro-batches (engine/workers/loss_weights.py).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import httpx
import pytest

from tests.integration.helpers import RAY, base_args, free_port, ray_env, run_engine, start_ray_node, stop_ray_node
from tests.waiting import wait_for

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # four engine runs (two through a Ray of their own, one on two nodes)
KEYS = ("actor/grad_norm", "actor/pg_loss", "critic/vf_loss", "critic/grad_norm", "critic/score/mean")


def run(tiny_model, arith_data, out, workers, steps, cwd, **extra):
    args = base_args(tiny_model, arith_data, out, **{
        "algorithm.adv_estimator": "gae", "actor_rollout_ref.rollout.n": 1,
        "actor_rollout_ref.rollout.do_sample": "False",
        "actor_rollout_ref.actor.ppo_mini_batch_size": 16, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
        "critic.ppo_micro_batch_size_per_gpu": 4, "trainer.n_gpus_per_node": workers,
        "trainer.total_training_steps": steps, "trainer.save_freq": 2, "trainer.val_before_train": "False",
        "trainer.test_freq": -1, "trainer.logger": "['console','file']"}
        | ({"ray_init.mode": "in_process"} if workers == 1 and "trainer.nnodes" not in extra else {}) | extra)
    result = run_engine(args, cwd, env=ray_env() if extra else None)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def step_metrics(out) -> dict[int, dict]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: {k: r["data"][k] for k in KEYS} for r in records if "actor/grad_norm" in r["data"]}


def assert_close(a: dict, b: dict, what: str):
    for key in KEYS:
        assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), f"{what}: {key} {a[key]} vs {b[key]}"


@pytest.fixture(scope="module")
def two_workers(tiny_model, arith_data, tmp_path_factory):
    """The one-node two-worker run (3 steps, a checkpoint at step 2), shared by the tests below."""
    out = tmp_path_factory.mktemp("two") / "two"
    run(tiny_model, arith_data, out, workers=2, steps=3, cwd=out.parent)
    return out


def test_one_and_two_workers_agree_and_checkpoints_reshard(tiny_model, arith_data, two_workers, tmp_path):
    one, two = tmp_path / "one", two_workers
    run(tiny_model, arith_data, one, workers=1, steps=2, cwd=tmp_path)
    m1, m2 = step_metrics(one), step_metrics(two)
    assert sorted(m1) == [1, 2] and sorted(m2) == [1, 2, 3]
    assert m1[1]["actor/grad_norm"] > 0 and m1[1]["critic/vf_loss"] > 0
    for step in (1, 2):
        assert_close(m1[step], m2[step], f"step {step}, 1 vs 2 workers")

    # checkpoints are written in the background by default (checkpoint.async_save): the run completed them
    assert not list(two.glob(".tmp_global_step_*")) and (two / "latest_checkpointed_iteration.txt").read_text() == "3"
    assert all((two / f"global_step_{s}" / role / ".metadata").exists() for s in (2, 3) for role in ("actor", "critic"))
    # the checkpoint that 2 workers saved at step 2 resumes on 1 worker: step 3 as if uninterrupted (on 2 workers,
    # one per node: test_two_nodes_one_worker_each)
    resumed = resume_dir(two, tmp_path / "resumed_on_1")
    result = run(tiny_model, arith_data, resumed, workers=1, steps=3, cwd=tmp_path)
    assert "resumed" in result.stdout
    m = step_metrics(resumed)
    assert sorted(m) == [3], f"resumed on 1 worker: steps {sorted(m)}"
    assert_close(m[3], m2[3], "step 3 resumed on 1 worker")


def resume_dir(two, resumed):
    """A run folder holding the two-worker run's step-2 checkpoint as its latest."""
    resumed.mkdir()
    shutil.copytree(two / "global_step_2", resumed / "global_step_2")
    (resumed / "latest_checkpointed_iteration.txt").write_text("2")
    return resumed


def ray_json(*args) -> list[dict]:
    result = subprocess.run([RAY, *args, "--format", "json"], env=ray_env(), capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def listed_nodes(result: subprocess.CompletedProcess) -> list[dict]:
    """`ray list nodes` output while the head comes up: it may fail, or print "No resource in the cluster"
    (exit 0, not JSON) before the head registers itself; both mean no node yet."""
    if result.returncode != 0 or not result.stdout.lstrip().startswith("["):
        return []
    return json.loads(result.stdout)


@pytest.fixture()
def two_node_cluster():
    """Two Ray nodes on this machine, token auth. The head has a spare core: a placement that ignored
    trainer.nnodes (PACK, as before) would put both workers on it; STRICT_SPREAD must use both nodes."""
    gcs, dashboard = free_port(), free_port()
    url = f"http://127.0.0.1:{dashboard}"
    nodes = [start_ray_node(num_cpus=2, head_port=gcs, dashboard_port=dashboard)]
    try:
        def dashboard_answers() -> bool:  # any HTTP answer: a cheap probe before each `ray list` (a Python start)
            assert nodes[0].poll() is None, "`ray start --head` exited"
            try:
                httpx.get(url, timeout=5)
                return True
            except httpx.HTTPError:
                return False

        wait_for(dashboard_answers, 180, 0.5, "the Ray head's dashboard to answer")

        joins = [0]

        def both_nodes_alive() -> list[dict] | None:  # the state API answers once the head is up; then node 2 joins
            assert nodes[0].poll() is None, "`ray start --head` exited"
            if len(nodes) == 2 and nodes[1].poll() is not None:
                # the joining node gave up: Ray gives a node a fixed window to register, which a loaded machine can
                # miss; a node that never joins still fails below, after three starts
                assert joins[0] < 3, f"the second node's `ray start` exited {joins[0]} times"
                stop_ray_node(nodes.pop())
            ok = subprocess.run([RAY, "list", "nodes", "--address", url, "--format", "json"], env=ray_env(),
                                capture_output=True, text=True, check=False)
            alive = [n for n in listed_nodes(ok) if n["state"] == "ALIVE"]
            if len(alive) == 1 and len(nodes) == 1:
                nodes.append(start_ray_node(num_cpus=1, head_port=gcs))
                joins[0] += 1
            return alive if len(alive) == 2 else None

        alive = wait_for(both_nodes_alive, 300, 2, "the two-node Ray cluster")
        yield f"127.0.0.1:{gcs}", url, {n["node_id"] for n in alive}
    finally:
        for node in reversed(nodes):
            stop_ray_node(node)


def test_two_nodes_one_worker_each(two_node_cluster, tiny_model, arith_data, two_workers, tmp_path):
    """trainer.nnodes=2 trainer.n_gpus_per_node=1 on a two-node cluster: one worker per node, and, resuming the
    one-node two-worker run's step-2 checkpoint, a step 3 equal to that run's (two workers again, placed otherwise)."""
    address, url, node_ids = two_node_cluster
    out = resume_dir(two_workers, tmp_path / "two_nodes")
    result = run(tiny_model, arith_data, out, workers=1, steps=3, cwd=tmp_path,
                 **{"trainer.nnodes": 2, "ray_init.address": address, "trainer.save_freq": -1})
    assert "resumed" in result.stdout
    # where the workers ran, from Ray itself (the actors stay listed after they end)
    actors = ray_json("list", "actors", "--address", url, "--detail", "--filter", "class_name=TrainWorker")
    assert len(actors) == 2 and {a["node_id"] for a in actors} == node_ids, actors
    # and the engine's own `started` line says the same
    placement = re.findall(r"node (\w+): ranks ([\d,]+)", re.search(r"placement=(.*)", result.stdout).group(1))
    assert sorted(r for _, r in placement) == ["0", "1"] and {n for n, _ in placement} == {i[:8] for i in node_ids}
    m2, mn = step_metrics(two_workers), step_metrics(out)
    assert sorted(mn) == [3], f"resumed on two nodes: steps {sorted(mn)}"
    assert_close(m2[3], mn[3], "step 3, 2 workers on 1 node vs resumed on 1 worker on each of 2 nodes")
