#!/usr/bin/env bash
# The README's seed command through its real entry point (`python -m engine.main_ppo`) on a device machine, as a
# user runs it: unchanged except the model (random-init Qwen2.5-0.5B architecture) and data paths (GSM8K from
# /tmp/.whl-gsm8k), 12 steps, checkpoint and validation every 10; the file logger is added beside the console so
# that every phase's timing and the rollout-vs-actor mismatch of every step come back ($OUT/seed-LABEL-metrics.jsonl).
#   bash engine/bench/device_seed.sh LABEL [key=value ...]      (e.g. ray_kwargs.ray_init.mode=ray)
# Prints the run's output, every line prefixed with seconds since launch (device_issue26.sh keeps it under $OUT),
# then one JSON line from step_clock.py: launch -> workers up and -> the first step (the cold-start figure), the
# wall time between step ends, and each validation's and checkpoint save's seconds by step (first vs later).
set -uo pipefail
label=$1; shift
gsm=/tmp/.whl-gsm8k
[ -f /tmp/seed-data/train.parquet ] || python3 -m engine.data.gsm8k --input $gsm --local_dir /tmp/seed-data >/dev/null
[ -f /tmp/seed-model/config.json ] || python3 -m engine.models.random --arch qwen2.5-0.5b --out /tmp/seed-model >/dev/null
stamp() { python3 -u -c "
import sys, time
t0 = float(sys.argv[1])
for line in sys.stdin:
    print(f'{time.time() - t0:7.1f} {line}', end='', flush=True)" "$1"; }
t0=$(python3 -c 'import time; print(time.time())')
# the seed command as engine/bench/seed_run.py has it (one copy of the README's), then what a user's run adds:
# validation and a checkpoint every 10 steps, 15 epochs capped at 12 steps, console + file logger
mapfile -t seed < <(python3 -c "from engine.bench.seed_run import seed_overrides
print('\\n'.join(seed_overrides('/tmp/seed-model', '/tmp/seed-data', 12)))")
PYTHONUNBUFFERED=1 python3 -m engine.main_ppo "${seed[@]}" "trainer.logger=['console','file']" \
  trainer.save_freq=10 trainer.test_freq=10 trainer.total_epochs=15 trainer.default_local_dir=/tmp/ckpt-$label "$@" 2>&1 \
  | stamp "$t0" | tee /tmp/seed-$label.log
rc=${PIPESTATUS[0]}
# every metric of every step (phase timings, mismatch, memory): the file logger's metrics.jsonl, beside the log
[ -n "${OUT:-}" ] && cp /tmp/ckpt-$label/metrics.jsonl "$OUT/seed-$label-metrics.jsonl" 2>/dev/null
echo "[device_seed] $label clock: $(python3 engine/bench/step_clock.py /tmp/seed-$label.log \
  --metrics /tmp/ckpt-$label/metrics.jsonl 2>&1 | tail -n 3)"
# a checkpoint of actor and critic (weights and Adam state) is ~12 GB: two per run filled the 64 GiB disk by the
# fourth run (2026-12-06, h100c: "unexpected pos" from torch.save, then the machine stopped answering)
echo "[device_seed] $label checkpoints: $(du -sh /tmp/ckpt-$label 2>/dev/null | cut -f1)"; rm -rf /tmp/ckpt-$label
echo "[device_seed] $label exit $rc after $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
