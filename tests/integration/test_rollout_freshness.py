"""The update reached the rollout, every step (issue 27): stale rollouts planted in a real worker
(tests/integration/freshness_probe.py, in a subprocess) are flagged by the worker's check (rollout/weights_stale,
rollout/weight_fingerprint_gap; engine/rollout/freshness.py) and normal syncs are not:
  - vLLM on CPU (one engine start): full fine-tuning with a skipped sync, and a LoRA actor whose adapter never
    reaches vLLM (verl #7495);
  - the static decoder with a LoRA actor, binding the base weights without the adapter."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.helpers import REPO, engine_env
from tests.vllm_check import needs_vllm


def probe(model, data, mode: str) -> dict:
    proc = subprocess.run([sys.executable, str(REPO / "tests/integration/freshness_probe.py"), model, str(data), mode],
                          check=False, cwd=REPO, env=engine_env() | {"VLLM_CPU_KVCACHE_SPACE": "1"},
                          capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-5000:]
    result = json.loads(lines[-1][len("PROBE "):])
    print(f"\nfreshness probe ({mode}):", result)
    return result


def fresh(m: dict) -> bool:
    """The rollout holds exactly the actor's weights (fp32 both sides): the fingerprints agree."""
    return m["rollout/weights_stale"] == 0 and m["rollout/weight_fingerprint_gap"] < 1e-9 and m["rollout/stale_params"] == 0


def stale(m: dict) -> bool:
    """Flagged, with the numbers: the rollout is at least half the actor's move away from it."""
    return m["rollout/weights_stale"] == 1 and m["rollout/stale_params"] >= 1 \
        and m["rollout/weight_fingerprint_gap"] >= 0.5 * m["rollout/actor_weight_change"] > 1e-3


@needs_vllm
@pytest.mark.slow  # starts a vLLM engine (in the probe's subprocess)
def test_vllm_a_skipped_sync_and_an_adapter_that_never_arrives_are_flagged_at_their_first_step(tiny_model,
                                                                                                 arith_data):
    r = probe(tiny_model, arith_data, "vllm")
    full, adapter = r["full"], r["lora"]
    # full fine-tuning: normal sync, the sync skipped, normal again; the actor moved at every update
    assert all(m["rollout/actor_weight_change"] > 1e-3 for m in full), full
    assert fresh(full[0]) and stale(full[1]) and fresh(full[2]), full
    # a skipped sync leaves the engine exactly one update behind: the gap is the actor's move
    assert full[1]["rollout/weight_fingerprint_gap"] == pytest.approx(full[1]["rollout/actor_weight_change"])
    # LoRA: the adapter trains while the sync streams the base without it from the first step on: stale at that
    # very step and the next; with the merged weights synced again the rollout is fresh
    assert r["lora_trainable"] > 0
    assert all(m["rollout/actor_weight_change"] > 1e-3 for m in adapter), adapter
    assert stale(adapter[0]) and stale(adapter[1]) and fresh(adapter[2]) and fresh(adapter[3]), adapter
    assert all(m["timing_s/weight_check"] >= 0 for m in full + adapter)


def test_static_decoder_binding_the_base_without_the_adapter_is_flagged(tiny_model, arith_data):
    r = probe(tiny_model, arith_data, "static")
    assert r["rollout"] == "StaticDecoder"
    steps = r["steps"]
    # generations 1-2: the merged weights are bound (at 2 the adapter has moved: the actor's change is seen)
    assert fresh(steps[0]) and fresh(steps[1]) and steps[1]["rollout/actor_weight_change"] > 1e-3, steps
    # 3-4: the decoder binds the base weights; 5: the merged ones again
    assert stale(steps[2]) and stale(steps[3]) and fresh(steps[4]), steps
