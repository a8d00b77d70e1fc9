#!/usr/bin/env bash
# Issue 40's GPU measurements on one warm device machine, after the transfer calls of
# `device_vllm_prep.sh --no-vllm` (no vLLM needed: the engine's packages, Ray and TRL in /tmp/site, GSM8K in
# /tmp/.whl-gsm8k; its last call runs device_vllm_install.sh, then this script). One PART or more a call: `bash engine/bench/device_issue40.sh PART...`. Each part keeps its raw output under $OUT
# (PART.jsonl = stdout, PART.err = stderr; name them with the card when they go into benchmarks/results/) and is
# time-limited, so one failing part leaves the others. Suggested calls (each under 10 minutes):
#   1. versions cuda-tests seed      2. w2-swing w2-rows      3. ckpt seed-warm      (4. w1-trl)
# Parts:
#   versions    the card (gpu.txt), torch, triton, numpy
#   cuda-tests  the CUDA tests as written (§6): kernels, packing, checkpoints (-rs: every skip with its reason)
#   seed        the seed command through engine.main_ppo, the first run on this machine (cold compile caches):
#               the last line gives launch -> workers up / first step, wall time between step ends, validation's
#               first and later pass, checkpoint blocking first and later (§2, §3)
#   seed-warm   the same again (warm compile caches)
#   w2-swing    W2 at defaults, 2 warm-up + 4 timed steps (§4): the update_actor line has every step's time
#               (runs), MFU (mfu_runs) and what the update ran with (micro_batches_runs, micro_shapes_runs,
#               micro_tokens_max/min_runs, micro_padded_tokens_runs, alloc_retries_runs, device_allocs_runs,
#               compiled_graphs_runs); PART.err has the same per step
#   w2-rows     the same with the old plan (32-row micro-batches, no token budget, checkpointing off): which beats
#   ckpt        the checkpoint's blocking, first save and later, buffers allocated at the first save vs ahead
#               (engine.bench.checkpoint_save, actor + critic of the 0.5B model)
#   w1-trl      W1 at defaults vs TRL, the ratio on wall time for both sides (§1, §5)
set -uo pipefail
# the carried packages first, then the checkout; an inherited PYTHONPATH stays behind them (§6)
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH} TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export VLLM_USE_FLASHINFER_SAMPLER=0
gsm=/tmp/.whl-gsm8k
PART_SHOW="Error|Traceback|\[rlstudio\] warning"
source "$(dirname "$0")/device_part.sh"
update_line() {  # the W2 part's update_actor line: per-step times, MFU and the probes
  grep '"phase": "update_actor"' "$OUT/$1.jsonl" | tail -n 1; grep '"phase": "step_wall"' "$OUT/$1.jsonl" | tail -n 1; }
for what in "$@"; do
  case $what in
    versions)
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
      python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__,
'numpy', numpy.__version__, 'cuda', torch.version.cuda)" 2>&1 | tail -n 3 ;;
    cuda-tests)
      part cuda-tests 300 python3 -m pytest -q -rs -p no:randomly -p no:cacheprovider tests/unit/test_decode_attention.py \
        tests/unit/test_fused_sampling.py tests/unit/test_packing_cuda.py tests/unit/test_checkpoint_cuda.py
      tail -n 15 "$OUT/cuda-tests.jsonl" ;;
    seed) part seed-cold 420 bash engine/bench/device_seed.sh cold; tail -n 3 "$OUT/seed-cold.jsonl" ;;
    seed-warm) part seed-warm 360 bash engine/bench/device_seed.sh warm; tail -n 3 "$OUT/seed-warm.jsonl" ;;
    w2-swing)
      part w2-swing 330 python3 -m engine.bench --workload w2 --gsm8k "$gsm" --warmup 2 --steps 4 --label swing
      update_line w2-swing ;;
    w2-rows)
      part w2-rows 300 python3 -m engine.bench --workload w2 --gsm8k "$gsm" --warmup 2 --steps 4 --label rows32 \
        actor_rollout_ref.model.enable_gradient_checkpointing=False trainer.auto_micro_batch=False
      update_line w2-rows ;;
    ckpt) part ckpt 300 python3 -m engine.bench.checkpoint_save --workload w1 --roles 2 --saves 3 ;;
    w1-trl)
      part w1-vs-trl 330 python3 -m engine.bench --workload w1 --vs-trl --steps 3
      grep '"phase": "ratio"' "$OUT/w1-vs-trl.jsonl" ;;
    *) echo "unknown part $what"; sed -n 2,25p "$0"; exit 2 ;;
  esac
done
