#!/usr/bin/env bash
# Sets up everything the tests need, then runs every test: the UI's logic tests (Vitest), then the Python
# suite (unit, engine integration on a real Ray, learning, backend, UI in Chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
export RLSTUDIO_REQUIRE_UI=1  # here a missing UI build or browser fails the UI tests instead of skipping them
bash scripts/setup.sh test
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
bash scripts/ui_unit_tests.sh  # Vitest
# Three workers on two cores: most tests spend their time waiting on a server, a Ray head or a subprocess, so a
# third worker fills the gaps. RLSTUDIO_TEST_WORKERS=0 runs everything in this process (easier to debug).
workers=${RLSTUDIO_TEST_WORKERS:-3}
dist=(); [ "$workers" = 0 ] || dist=(-n "$workers" --dist worksteal)
exec .venv/bin/python -m pytest "${dist[@]}" "${@:-tests}"  # arguments: run only those tests
