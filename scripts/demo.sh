#!/usr/bin/env bash
# Sets up, then starts the dashboard (http://127.0.0.1:8000 by default) with the built-in demo run training:
# the tiny model learning arithmetic by the seed's PPO (actor, rollout, reference and critic all acting; the
# `demo_ppo` preset) on a local Ray that the server starts and owns. The GRPO demo is the preset `demo`.
# Extra arguments go to the server (e.g. --port 8080, --data-dir DIR).
# Console only, without the server: .venv/bin/python -m engine.main_ppo --config-name demo_ppo
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
exec .venv/bin/python -m backend --demo "$@"
