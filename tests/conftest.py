"""Fixtures shared by every test directory."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory):
    """One real Ray head (`ray start --head`: token auth, 127.0.0.1, its own ports), started on first use and
    shared by every test that submits to an existing cluster: the backend's dispatch tests and `ray job submit`."""
    from backend.services.ray_head import LocalRayHead

    head = LocalRayHead(tmp_path_factory.mktemp("ray-head"), num_cpus=4)
    head.start()
    yield head
    head.stop()
