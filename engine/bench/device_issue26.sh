#!/usr/bin/env bash
# The GPU runs of issue 26 on one warm device machine, after the transfer calls of device_vllm_prep.sh (its last
# call installs and runs `bash engine/bench/device_issue26.sh PART...`; later calls name their parts). Each part
# writes its raw output under $OUT (stdout JSON lines + stderr) and is time-limited, so one failing part leaves the
# others. seed and w1-trl need the bundle built with --ray (Ray, TRL).
#   vllm-bench   plain vLLM on W1 and W2 (engine.bench --plain-vllm), then W1 and W2 through rlstudio's vLLM rollout
#   seed-vllm    the seed command with rollout.name=vllm (CUDA graphs on), 12 steps
#   seed         the seed command as written (HF rollout, in-process worker) and with ray_init.mode=ray, 12 steps
#   vllm-w2      the vLLM seed run; W2 static decoder vs plain vLLM (one machine)
#   tis-seed     the vLLM seed run with token TIS; the seed command as written
#   w1-trl       W1 at defaults vs TRL in one invocation; W2 at defaults (static decoder)
#   async-w2     issue 29: W2 in sync and colocate_async (threshold 2), one call; async-w2c: bypass, sync, partial rollout;
#                async-w2d: sync then bypass (what was run second)
#   trl-lora     W1 vs TRL, W1 with lora_rank=64 (all-linear), W2 at defaults (needs only the --no-vllm bundle)
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
# vLLM's top-k/top-p sampler probes FlashInfer, which is not carried (a JIT package with its own CUDA toolchain
# needs); its PyTorch sampler runs instead, for plain vLLM and the rollout alike
export VLLM_USE_FLASHINFER_SAMPLER=0
gsm=/tmp/.whl-gsm8k
PART_SHOW="Error|error|Traceback|WARN|warn|\[bench\]|\[device"
source "$(dirname "$0")/device_part.sh"
for what in "$@"; do
  case $what in
    versions)
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
      python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" 2>&1 | tail -n 20 ;;
    vllm-bench)
      part w1-plain-vllm 170 python3 -m engine.bench --workload w1 --plain-vllm --steps 3
      part w2-plain-vllm 170 python3 -m engine.bench --workload w2 --plain-vllm --gsm8k "$gsm" --steps 3
      part w1-rlstudio-vllm 210 python3 -m engine.bench --workload w1 --steps 3 actor_rollout_ref.rollout.name=vllm \
        actor_rollout_ref.rollout.enforce_eager=False ;;
    w2-vllm)
      part w2-rlstudio-vllm 300 python3 -m engine.bench --workload w2 --gsm8k "$gsm" --steps 2 \
        actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.enforce_eager=False ;;
    seed-vllm)
      part seed-vllm 420 bash engine/bench/device_seed.sh vllm actor_rollout_ref.rollout.name=vllm \
        actor_rollout_ref.rollout.enforce_eager=False ;;
    seed-vllm-tis)
      part seed-vllm-tis 420 bash engine/bench/device_seed.sh vllm-tis actor_rollout_ref.rollout.name=vllm \
        actor_rollout_ref.rollout.enforce_eager=False algorithm.rollout_correction.rollout_is=token ;;
    seed)
      part seed-default 300 bash engine/bench/device_seed.sh default
      part seed-ray 300 bash engine/bench/device_seed.sh ray ray_init.mode=ray ;;
    final)  # the last batch of 2026-12-06: what needs vLLM, rollout comparisons in one call
      part seed-vllm 230 bash engine/bench/device_seed.sh vllm actor_rollout_ref.rollout.name=vllm \
        actor_rollout_ref.rollout.enforce_eager=False
      part w1-plain-vllm 100 python3 -m engine.bench --workload w1 --plain-vllm --steps 2
      part w1-static 60 python3 -m engine.bench --workload w1 --decode-variants --steps 2 --variants default
      part w2-plain-vllm 100 python3 -m engine.bench --workload w2 --plain-vllm --gsm8k "$gsm" --steps 2
      part w2-static 60 python3 -m engine.bench --workload w2 --gsm8k "$gsm" --decode-variants --steps 2 --variants default ;;
    vllm-w2)  # 2026-12-06 second session, call 3: the vLLM seed run, then W2 static vs plain vLLM on one machine
      part seed-vllm 300 bash engine/bench/device_seed.sh vllm actor_rollout_ref.rollout.name=vllm \
        actor_rollout_ref.rollout.enforce_eager=False
      part w2-plain-vllm 110 python3 -m engine.bench --workload w2 --plain-vllm --gsm8k "$gsm" --steps 2
      part w2-static 150 python3 -m engine.bench --workload w2 --gsm8k "$gsm" --decode-variants --warmup 2 --steps 2 \
        --variants default ;;
    tis-seed)  # call 4: the vLLM seed run with token TIS, then the seed command as written (static decoder)
      part seed-vllm-tis 300 bash engine/bench/device_seed.sh vllm-tis actor_rollout_ref.rollout.name=vllm \
        actor_rollout_ref.rollout.enforce_eager=False algorithm.rollout_correction.rollout_is=token
      part seed-default 280 bash engine/bench/device_seed.sh default ;;
    w1-trl)
      part w1-vs-trl 330 python3 -m engine.bench --workload w1 --vs-trl --steps 3
      part w2-static 240 python3 -m engine.bench --workload w2 --gsm8k "$gsm" --steps 2 ;;
    trl-lora)  # 2026-12-06 third session (bundle from --no-vllm): W1 at defaults vs TRL, W1 with LoRA rank 64
      # (all-linear; the reference is the base with the adapter off), W2 at defaults, one machine
      part w1-vs-trl 260 python3 -m engine.bench --workload w1 --vs-trl --steps 3
      part w1-lora64 150 python3 -m engine.bench --workload w1 --steps 3 --label lora64 \
        actor_rollout_ref.model.lora_rank=64 actor_rollout_ref.model.lora_alpha=128 \
        actor_rollout_ref.model.target_modules=all-linear
      part w2-static 150 python3 -m engine.bench --workload w2 --gsm8k "$gsm" --warmup 2 --steps 2 ;;
    async-w2)  # issue 29: W2 in sync and in colocate_async (one batch ahead), same machine, same call
      A="trainer.use_v1=True trainer.v1.trainer_mode=colocate_async trainer.v1.sampler.max_off_policy_threshold=2"
      part w2-sync 240 python3 -m engine.bench --workload w2 --gsm8k "$gsm" --warmup 2 --steps 3 --label sync
      part w2-colocate 300 python3 -m engine.bench --workload w2 --gsm8k "$gsm" --warmup 2 --steps 3 \
        --label colocate_async $A ;;
    async-w2c)  # the second call: colocate_async with the rollout's log-probs as the old ones first (it pays the
      # cold compile caches), then sync, then the same with partial rollout (256-token chunks)
      A="trainer.use_v1=True trainer.v1.trainer_mode=colocate_async trainer.v1.sampler.max_off_policy_threshold=2"
      part w2-colocate-bypass 250 python3 -m engine.bench --workload w2 --gsm8k "$gsm" --warmup 2 --steps 3 \
        --label colocate_async_bypass $A algorithm.rollout_correction.bypass_mode=True
      part w2-sync 150 python3 -m engine.bench --workload w2 --gsm8k "$gsm" --warmup 2 --steps 3 --label sync
      part w2-colocate-partial 150 python3 -m engine.bench --workload w2 --gsm8k "$gsm" --warmup 2 --steps 3 \
        --label colocate_async_bypass_partial256 $A algorithm.rollout_correction.bypass_mode=True \
        trainer.v1.partial_rollout=True trainer.v1.partial_rollout_chunk=256 ;;
    async-w2d)  # what 635 s of device time allow: sync (it pays the cold compile caches), then colocate_async with
      # the rollout's log-probs as the old ones (bypass) on the warm caches
      A="trainer.use_v1=True trainer.v1.trainer_mode=colocate_async trainer.v1.sampler.max_off_policy_threshold=2"
      part w2-sync 250 python3 -m engine.bench --workload w2 --gsm8k "$gsm" --warmup 2 --steps 2 --label sync
      part w2-colocate-bypass 140 python3 -m engine.bench --workload w2 --gsm8k "$gsm" --warmup 2 --steps 3 \
        --label colocate_async_bypass $A algorithm.rollout_correction.bypass_mode=True ;;
    *) echo "unknown part $what"; exit 2 ;;
  esac
done
