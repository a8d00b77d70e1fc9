# rlstudio server: node builds the UI, python runs the API (which launches runs on a Ray cluster).
# Build from the repository root:  docker build -f docker/server.Dockerfile -t rlstudio-server .

FROM node:22.12-bookworm-slim AS ui
WORKDIR /src
COPY package.json package-lock.json ./
COPY frontend/package.json frontend/
RUN npm ci --no-audit --no-fund
COPY frontend/ frontend/
RUN npm run build --workspace frontend

FROM python:3.11.11-slim-bookworm AS server
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    RLSTUDIO_HOST=0.0.0.0 \
    RLSTUDIO_DATA_DIR=/data \
    RLSTUDIO_FRONTEND_DIR=/app/frontend/dist
WORKDIR /app
# The server only validates configs with engine.config and talks to Ray; a CPU torch keeps the image small.
RUN pip install --index-url https://download.pytorch.org/whl/cpu "torch==2.13.0"
COPY pyproject.toml README.md ./
COPY engine/ engine/
COPY backend/ backend/
COPY migrations/ migrations/
RUN pip install -e . \
    && useradd --create-home --uid 1000 rlstudio \
    && mkdir -p /data \
    && chown rlstudio /data
COPY --from=ui /src/frontend/dist /app/frontend/dist
USER 1000
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
CMD ["python", "-m", "backend", "--host", "0.0.0.0", "--data-dir", "/data"]
