#!/usr/bin/env bash
# Issue 39 on one GPU (NOT RUN YET: written on a CPU-only session): exact mode vs the default, same call, raw output
# kept under $OUT. W1 and W2 through engine/bench/exact_compare.py (default vs exact, 1 and 4 mini-batches per step:
# per-phase seconds, tokens/s and the mismatch in the raw lines), then the seed's command exact vs default
# (device_seed.sh keeps every step's metrics: exact/mismatched_tokens must be 0 on every step).
#   bash engine/bench/device_exact.sh [w1|w2|seed|vllm ...]      (default: w1 w2)
# vllm: the vLLM rollout with and without VLLM_BATCH_INVARIANT=1 (mismatch and speed; exact mode refuses vLLM).
set -uo pipefail
OUT=${OUT:-/tmp/exact-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/exact-gpu.txt"
parts=("$@"); [ ${#parts[@]} -eq 0 ] && parts=(w1 w2)
for part in "${parts[@]}"; do
  case $part in
    w1|w2) steps=3; [ "$part" = w2 ] && steps=2
           python3 -m engine.bench.exact_compare --workload "$part" --steps $steps --out "$OUT/exact-$part.jsonl" \
             > "$OUT/exact-$part.txt" 2> "$OUT/exact-$part.err"; echo "[device_exact] $part exit $?"; cat "$OUT/exact-$part.txt" ;;
    seed)  bash engine/bench/device_seed.sh default > "$OUT/seed-default.log" 2>&1
           bash engine/bench/device_seed.sh exact actor_rollout_ref.rollout.exact=True > "$OUT/seed-exact.log" 2>&1
           tail -3 "$OUT/seed-default.log" "$OUT/seed-exact.log" ;;
    vllm)  for bi in 0 1; do
             VLLM_BATCH_INVARIANT=$bi python3 -m engine.bench --workload w1 --steps 3 --label "vllm-bi$bi" \
               --out "$OUT/exact-vllm.jsonl" actor_rollout_ref.rollout.name=vllm 2> "$OUT/exact-vllm-bi$bi.err" \
               | grep -E '"phase": "(gen|step|check)"'
           done ;;
    *) echo "unknown part $part (w1, w2, seed, vllm)"; exit 2 ;;
  esac
done
