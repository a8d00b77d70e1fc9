#!/usr/bin/env bash
# Sets up everything the tests need, then runs every test (unit, integration, learning, UI).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
exec .venv/bin/python -m pytest tests "$@"
