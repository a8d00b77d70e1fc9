"""Worker placement (engine/distributed/ray_worker_group.py): trainer.nnodes × trainer.n_gpus_per_node is honoured
exactly — one bundle per node, spread over distinct nodes — and a cluster too small is a clear error, not a
hang. The plan is computed from `ray.nodes()`-shaped records; the real two-node run is
tests/integration/test_worker_counts.py::test_two_nodes_one_worker_each."""
from __future__ import annotations

import pytest

from engine.config import ConfigError, build_config
from engine.distributed.ray_worker_group import ResourceError, plan_placement
from engine.workers.launch import uses_ray


def node(ip: str, cpu: float, gpu: float = 0, alive: bool = True) -> dict:
    resources = {"CPU": cpu, "memory": 1e9}
    if gpu:
        resources["GPU"] = gpu
    return {"NodeID": ip.replace(".", "") * 4, "NodeManagerAddress": ip, "Alive": alive, "Resources": resources}


def test_two_gpu_nodes_spread_one_bundle_of_eight_each():
    plan = plan_placement([node("10.0.0.1", 64, 8), node("10.0.0.2", 64, 8)], "cuda", nnodes=2, n_per_node=8)
    assert plan.strategy == "STRICT_SPREAD" and plan.world == 16
    assert plan.bundles == [{"CPU": 32, "GPU": 8}, {"CPU": 32, "GPU": 8}]
    assert (plan.num_gpus, plan.num_cpus) == (1, 4)  # CPUs per GPU worker capped at 4
    assert [plan.bundle_of(r) for r in (0, 7, 8, 15)] == [0, 0, 1, 1]


def test_one_node_is_one_bundle():
    plan = plan_placement([node("127.0.0.1", 2)], "cpu", nnodes=1, n_per_node=2)
    assert plan.bundles == [{"CPU": 2}] and plan.strategy == "PACK" and plan.num_cpus == 1


def test_cpu_workers_get_the_smallest_chosen_nodes_share():
    # the head has a spare core; each of the two workers still gets 1 (the smaller node's), so both nodes fit
    plan = plan_placement([node("127.0.0.1", 2), node("127.0.0.1", 1)], "cpu", nnodes=2, n_per_node=1)
    assert plan.bundles == [{"CPU": 1}, {"CPU": 1}] and plan.strategy == "STRICT_SPREAD"


def test_too_few_nodes_names_the_keys_and_the_cluster():
    with pytest.raises(ResourceError) as err:
        plan_placement([node("10.0.0.1", 64, 8), node("10.0.0.2", 64, 4), node("10.0.0.3", 8, 0, alive=False)],
                       "cuda", nnodes=2, n_per_node=8)
    text = str(err.value)
    assert "trainer.nnodes=2" in text and "trainer.n_gpus_per_node=8" in text and "8 GPUs each" in text
    assert "2 nodes: 10.0.0.1 (64 CPU, 8 GPU); 10.0.0.2 (64 CPU, 4 GPU)" in text  # the dead node is not counted


def test_one_node_too_small_on_cpu():
    with pytest.raises(ResourceError, match=r"1 node: 127.0.0.1 \(2 CPU, 0 GPU\)"):
        plan_placement([node("127.0.0.1", 2)], "cpu", nnodes=1, n_per_node=4)


def test_several_nodes_without_a_cluster_fail_before_ray_starts(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ConfigError, match=r"trainer.nnodes=2 .*ray_init.address"):
        uses_ray(build_config(["trainer.nnodes=2", "trainer.n_gpus_per_node=1"]))
    assert uses_ray(build_config(["trainer.nnodes=2", "ray_init.address=10.0.0.1:6379"]))
