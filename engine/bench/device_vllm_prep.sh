#!/usr/bin/env bash
# Prepares vLLM 0.26.0 (the release that pins torch 2.11.0, the GPU image's torch; its extensions link CUDA 13's
# libcudart, the image's CUDA) for the device machine, whose calls carry at most 64 MiB while the wheel is 304 MB.
# Run it here, in the project root, after ../shared/tools/device-wheels.sh (Ray, pydantic & co. in .whl-ray1,
# .whl-ray2, .whl). It fills ignored folders:
#   .whl-vllm1/, .whl-vllm2/  vLLM's package unpacked and trimmed, as xz parts (~55 MB each). Left out: what the
#                             rollout never loads on a Hopper GPU: FlashAttention-2's kernels (sm80; vLLM takes
#                             FlashAttention-3 there), DeepGEMM's and the sm100 FMHA's CUTLASS headers, the Rust
#                             front end (vllm-rs, an API server), the API server's static files and the benchmarks.
#   .whl-vdeps/               the runtime packages `LLM(...)` and generation import that the image lacks (found by
#                             importing vLLM's engine, worker, attention, compilation, loader and layer modules in a
#                             venv and listing what loaded; the big optional ones, flashinfer, tilelang, the cutlass
#                             DSL, torchcodec and video decoders, are never loaded on this path and stay out)
#   .whl-gsm8k/               GSM8K's train.jsonl and test.jsonl (W2's prompts, the seed command's data)
# Then, on one warm machine, back to back (each call within 30 s of the last one's end; carry in brackets):
#   1 [.whl-ray1 .whl .whl-gsm8k]: mkdir -p /tmp/rw && cp -r .whl-ray1/* .whl/* /tmp/rw/ && cp -r .whl-gsm8k /tmp/
#   2 [.whl-ray2 .whl-vdeps]:      cp .whl-ray2/* .whl-vdeps/* /tmp/rw/
#   3 [.whl-vllm1]:                cp .whl-vllm1/* /tmp/rw/
#   4 [.whl-vllm2]:                bash engine/bench/device_vllm_install.sh && YOUR COMMAND
# and every later call on that machine starts with `export PYTHONPATH=/tmp/site:$PWD`.
set -euo pipefail
VLLM=${VLLM_VERSION:-0.26.0}
tmp=$(mktemp -d)
plat="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_31_x86_64 \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 --platform manylinux_2_24_x86_64"
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat "$@" 2>&1 \
  | grep -v "is ignored: it is neither" || true; }
dl -d "$tmp" "vllm==$VLLM"
(cd "$tmp" && unzip -q vllm-*.whl && rm vllm-*.whl)
(cd "$tmp" && tar -c --exclude='vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' --exclude='vllm/third_party/deep_gemm' \
   --exclude='vllm/third_party/fmha_sm100' --exclude='vllm/vllm-rs' \
   --exclude='vllm/entrypoints/serve/instrumentator/static' --exclude='vllm/benchmarks' vllm vllm-*.dist-info \
   | xz -T0 -9 > vllm.tar.xz && split -b 55M vllm.tar.xz vllm.tar.xz.part.)
rm -rf .whl-vllm1 .whl-vllm2 .whl-vdeps .whl-gsm8k && mkdir -p .whl-vllm1 .whl-vllm2 .whl-vdeps .whl-gsm8k
mv "$tmp"/vllm.tar.xz.part.aa .whl-vllm1/ && mv "$tmp"/vllm.tar.xz.part.a[b-z] .whl-vllm2/
dl -d .whl-vdeps cachetools==7.3.3 cbor2==6.3.0 email_validator==2.4.0 dnspython==2.9.2 fastapi==0.136.3 \
  starlette==1.10.0 httpcore2==2.17.0 httpx2==2.17.0 llguidance==1.7.6 mistral_common==1.13.1 msgspec==0.23.0 \
  openai==3.63.0 jiter==0.19.0 distro==1.9.0 openai-harmony opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 \
  opentelemetry-semantic-conventions==0.66b2 opentelemetry-semantic-conventions-ai==0.5.1 \
  partial-json-parser==0.2.1.1.post7 pybase64==1.5.1 pycountry==26.2.16 pydantic-extra-types==2.11.1 \
  python-multipart==0.0.34 sniffio==1.3.1 truststore==0.10.5 apache-tvm-ffi==0.1.10 xgrammar==0.2.8 pyzmq==27.3.0 \
  orjson==3.13.0 compressed-tensors==0.17.0 loguru==0.7.3 uvicorn==0.55.0 watchfiles==1.3.0 blake3==1.0.11 \
  depyf==0.20.0 astor==0.8.1 importlib-metadata==10.2.0 lm-format-enforcer==0.11.3 interegular==0.3.3 \
  outlines_core==0.2.14 lark==1.2.2 setproctitle==1.3.8 prometheus-fastapi-instrumentator==8.1.0 ijson==3.6.0 \
  nvtx==0.2.15
gsm=${RLSTUDIO_GSM8K:-$(cd .. && pwd)/shared/data/gsm8k}
cp "$gsm"/train.jsonl "$gsm"/test.jsonl .whl-gsm8k/
for d in .whl-vllm1 .whl-vllm2 .whl-vdeps .whl-gsm8k; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude; done
rm -rf "$tmp"
du -sh .whl-ray1 .whl-ray2 .whl .whl-vllm1 .whl-vllm2 .whl-vdeps .whl-gsm8k
