# rlstudio GPU worker: CUDA, the engine with the vllm extra, joins a Ray cluster (also used for the head,
# because a Ray job's driver -- `python -m engine.main_ppo` -- runs on the head node).
# Build from the repository root:  docker build -f docker/worker.Dockerfile -t rlstudio-worker .

FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev build-essential git curl \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv
WORKDIR /app
COPY pyproject.toml README.md ./
COPY engine/ engine/
COPY backend/ backend/
COPY migrations/ migrations/
RUN pip install -e ".[vllm]" \
    && useradd --create-home --uid 1001 ray \
    && mkdir -p /data \
    && chown ray /data
USER 1001
ENV RAY_AUTH_MODE=token
# RAY_HEAD_ADDRESS (host:port of the head's GCS) and RAY_AUTH_TOKEN come from the environment (compose.yaml).
CMD ["sh", "-c", "exec ray start --address=\"${RAY_HEAD_ADDRESS:?set RAY_HEAD_ADDRESS}\" --block --disable-usage-stats"]
