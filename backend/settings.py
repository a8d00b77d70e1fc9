"""All server settings in one place (environment variables prefixed RLSTUDIO_, or `python -m backend` flags)."""
from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RLSTUDIO_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: Path = Path(".rlstudio")
    # A SQLite or PostgreSQL URL (backend/README.md, Database); default: a SQLite file in the data directory (WAL
    # mode, foreign keys on).
    database_url: str | None = None
    # The URL Ray jobs use to reach this server (default http://<host>:<port>, 0.0.0.0 -> 127.0.0.1).
    public_url: str | None = None
    # When set, every /api route needs `Authorization: Bearer <token>`; ingest also accepts a run's own token.
    api_token: SecretStr | None = None
    cors_origins: list[str] = []
    frontend_dir: Path = REPO_ROOT / "frontend" / "dist"

    # Ray. `ray_address` = an existing cluster's dashboard/job address (http://host:8265); unset = the
    # server starts and owns a local head on 127.0.0.1 (token auth) and stops it on shutdown.
    dispatch: bool = True
    ray_address: str | None = None
    ray_auth_token: SecretStr | None = None
    ray_num_cpus: int | None = None
    # The node address of the server's own head. Loopback (the default): every Ray component listens on 127.0.0.1
    # only. Another address of this machine lets other machines reach the head (its GCS and raylet then listen on
    # every interface, token auth on): an explicit choice, backend/README.md says what it exposes.
    ray_head_host: str = "127.0.0.1"
    max_concurrent_runs: int = 1
    job_module: str = "engine.main_ppo"  # `python -m <job_module> <overrides>`; tests use their own
    job_python: str | None = None  # interpreter in the job's entrypoint; default: this one for a local head
    job_workdir: Path | None = None  # the job's working directory (relative data paths); default: cwd
    # Environment variables every job gets, as JSON (RLSTUDIO_JOB_ENV='{"HF_HOME": "/data/hf"}'); the server's own
    # (RLSTUDIO_URL, RLSTUDIO_RUN_ID, RLSTUDIO_INGEST_TOKEN, RLSTUDIO_SPOOL_DIR) win over them. E.g. the trainer's
    # after-step hook, RLSTUDIO_AFTER_STEP=module:function (engine/trainer/hooks.py).
    job_env: dict[str, str] = {}
    job_stop_grace_s: float = 3.0
    poll_interval_s: float = 0.5
    # rlstudio's own log lines (dispatch: submitted, pending on Ray, re-attached, ...) on the console at this
    # level and above; the default keeps the console to warnings and the click-here banner.
    log_level: str = "WARNING"
    # The live feed keeps events this long: an SSE client may resume from any event younger than that.
    events_retention_s: float = 7 * 24 * 3600
    # run health (backend/services/health/): judged on ingest; false judges nothing (the benchmark's baseline)
    health_checks: bool = True
    health_sweep_s: float = 30.0  # how often running runs are judged for a stall (backend/services/health/watch.py)

    # webhooks (backend/services/webhooks/): false sends nothing (deliveries stay pending); a failed delivery is
    # retried after webhook_backoff_s x 2^(attempt - 1) s (at most 300 s), webhook_attempts attempts in all
    webhooks: bool = True
    webhook_attempts: int = 5
    webhook_backoff_s: float = 2.0
    webhook_timeout_s: float = 10.0

    # Ingest limits (documented in the API; over them -> 413).
    max_metric_points_per_request: int = 10_000
    max_samples_per_request: int = 1_000
    max_log_lines_per_request: int = 5_000
    max_request_bytes: int = 64 * 1024 * 1024  # a metrics, samples or logs upload
    max_json_bytes: int = 2 * 1024 * 1024  # any other body (a run's config and notes, an experiment, a status)

    @field_validator("database_url", "public_url", "api_token", "ray_address", "ray_auth_token", "job_python",
                     "job_workdir", mode="before")
    @classmethod
    def _empty_is_unset(cls, value):
        return None if value == "" else value  # `FOO=` in a compose file means "not set"

    @field_validator("ray_head_host")
    @classmethod
    def _head_host_is_an_address(cls, value: str) -> str:
        import ipaddress

        try:
            address = ipaddress.ip_address(value)
        except ValueError:
            if value == "localhost":
                return value
            raise ValueError(f"RLSTUDIO_RAY_HEAD_HOST: '{value}' is not an IP address; use 127.0.0.1 (the default, "
                             "loopback only) or one of this machine's addresses") from None
        if address.is_unspecified:
            raise ValueError(f"RLSTUDIO_RAY_HEAD_HOST: '{value}' is no node address (Ray needs the one address other "
                             "machines reach this one by); use 127.0.0.1 (the default) or one of this machine's "
                             "addresses") from None
        return value

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'rlstudio.db').resolve()}"

    @property
    def runs_dir(self) -> Path:
        return (self.data_dir / "runs").resolve()

    @property
    def server_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"
