#!/usr/bin/env bash
# Sets up, then trains the built-in demo (tiny model, synthetic arithmetic) and shows reward rising.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
exec .venv/bin/python -m engine.main_ppo --config-name demo "$@"
