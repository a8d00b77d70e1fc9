"""engine/bench/ratios.py and step_clock.py: every ratio is wall time over wall time (refused, with the reason, where
a side has none), read off real kept outputs where they exist (benchmarks/results/), and the stamped console log of
a run gives launch → first step, the wall time between step ends and the first and later validation/save."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.bench.ratios import from_lines, read_lines, vs_trl, vs_verl, wall_ratio
from engine.bench.step_clock import phase_timers, summary

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def test_wall_over_wall_and_refused_where_a_side_has_no_wall():
    assert wall_ratio(4.0, 8.0, "trl") == {"rlstudio_over_trl": 0.5, "speedup_vs_trl": 2.0, "basis": "wall"}
    refused = wall_ratio(3.59, None, "trl")
    assert refused["rlstudio_over_trl"] is None and "for trl" in refused["note"] and "rlstudio" not in refused["note"]
    # the W1 figures: timers 3.59 vs 8.49 s, but the engine's step_wall 3.99 s; TRL's wall 8.49 s
    line = vs_trl(3.99, 8.49, engine_timer=3.59, trl_timer=8.49)
    assert line["rlstudio_over_trl"] == pytest.approx(0.47, abs=0.001) and line["timer_ratio"] == pytest.approx(0.423, abs=0.001)
    assert vs_trl(3.99, None, 3.59, 8.49)["rlstudio_over_trl"] is None  # never the engine's wall over TRL's timer


def test_ratios_from_the_kept_h100_outputs():
    """The README's rollout figures (W1 2.1× plain vLLM, 3.4× with log-probs; W2 1.07×, the vLLM rollout in the step
    0.68×) come out of the raw files; the W1 TRL file predates step_wall, so its ratio is refused."""
    w1 = [*read_lines(RESULTS / "2026-12-06-h100b-c14-w1-plain-vllm.jsonl"),
          *read_lines(RESULTS / "2026-12-06-h100b-c14-w1-static.jsonl"),
          *read_lines(RESULTS / "2026-12-06-h100d-c02-w1-vs-trl.jsonl")]
    got = {(r.get("rlstudio"), r.get("vllm")): r for r in from_lines(w1)}
    assert got[("default", "plain")]["rlstudio_over_vllm_tokens_per_s"] == pytest.approx(2.1, abs=0.01)
    assert got[("default", "plain+logprobs")]["rlstudio_over_vllm_tokens_per_s"] == pytest.approx(3.41, abs=0.01)
    assert got[(None, None)]["rlstudio_over_trl"] is None and "before it was recorded" in got[(None, None)]["note"]
    assert all(r["basis"] == "wall" for r in got.values())
    w2 = [*read_lines(RESULTS / "2026-12-06-h100c-c03-w2-plain-vllm.jsonl"),
          *read_lines(RESULTS / "2026-12-06-h100c-c03-w2-static.jsonl"),
          *read_lines(RESULTS / "2026-12-06-h100c-c05-w2-rlstudio-vllm.jsonl")]
    got = {(r["rlstudio"], r["vllm"]): r["rlstudio_over_vllm_tokens_per_s"] for r in from_lines(w2)}
    assert got[("default", "plain")] == pytest.approx(1.07, abs=0.01)
    assert got[("step gen", "plain")] == pytest.approx(0.68, abs=0.01)


def test_trl_ratio_from_new_lines_uses_both_walls():
    lines = [{"workload": "w1", "impl": "rlstudio", "phase": "step", "timing_s": 3.59},
             {"workload": "w1", "impl": "rlstudio", "phase": "step_wall", "timing_s": 3.99},
             {"workload": "w1", "impl": "trl", "phase": "step", "timing_s": 8.49, "step_wall_s": 8.6}]
    (line,) = from_lines(lines)
    assert line["rlstudio_over_trl"] == round(3.99 / 8.6, 4) and line["basis"] == "wall"


SEED_LOG = RESULTS / "2026-12-06-h100d-c03-seed-default.jsonl"  # device_seed.sh's stamped console (h100d)


def test_step_clock_on_a_kept_seed_run():
    s = summary(str(SEED_LOG))
    assert s["workers_up_s"] == 24.4 and s["first_step_s"] == 77.2 and s["steps"] == 12
    assert s["step_wall_s"][2] == pytest.approx(31.9) and s["step_wall_s"][10] == pytest.approx(85.5)
    assert s["warm_wall_median_s"] == pytest.approx(5.85)
    timers = phase_timers(str(RESULTS / "2026-12-06-h100d-c03-seed-ray-metrics.jsonl"))
    assert set(timers["validation_s"]) == {10, 12} and set(timers["save_checkpoint_s"]) == {10, 12}


def test_verl_and_rlstudio_logs_on_one_clock(tmp_path):
    verl = tmp_path / "verl.log"
    verl.write_text("   30.0 some start-up line\n   60.5 step:1 - actor/pg_loss:0.1\n   70.5 step:2 - x:1\n"
                    "   80.0 step:3 - x:1\n   90.0 step:4 - x:1\n")
    rl = tmp_path / "rl.log"
    rl.write_bytes(b"   20.0 [rlstudio] started workers=1\n   21.0 Epoch 1 | Step 0 | arith val@1: 0.1\n"
                  b"   25.0 training: 10%|#\rEpoch 1 | Step 1 | Step Time: 4.0s\n   29.0 Epoch 1 | Step 2 | Step Time: 4.0s\n"
                  b"   33.0 Epoch 1 | Step 3 | Step Time: 4.0s\n   38.0 Epoch 1 | Step 4 | Step Time: 4.0s\n")
    r = vs_verl(str(verl), str(rl))
    assert r["verl_first_step_s"] == 60.5 and r["rlstudio_first_step_s"] == 25.0  # step 0 (validation) is no step
    assert r["verl_step_wall_s"] == pytest.approx(9.75) and r["rlstudio_step_wall_s"] == pytest.approx(4.5)
    assert r["rlstudio_over_verl"] == pytest.approx(4.5 / 9.75, abs=1e-4)


def test_the_scripts_run_as_the_device_scripts_call_them(tmp_path):
    """device_seed.sh / device_verl.sh call step_clock.py by path and ratios as a module (real subprocesses)."""
    run = subprocess.run([sys.executable, "engine/bench/step_clock.py", str(SEED_LOG)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["first_step_s"] == 77.2
    bad = subprocess.run([sys.executable, "-m", "engine.bench.ratios", str(tmp_path / "missing.jsonl")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and "cannot read" in bad.stderr and "Traceback" not in bad.stderr
