"""A workload through the real engine: the config a training run would build, the same worker group
(engine/workers/launch.py: one `TrainWorker`, in this process unless `ray_init.mode=ray`), and
`PPOTrainer.train_step`, timed per phase by the trainer's own timers."""
from __future__ import annotations

import statistics
import time

from engine.bench.step_probe import StepProbe
from engine.bench.workloads import Workload, bench_score, model_dir, prompt_texts, prompt_token_ids

ASCII_IDS = 94  # ids 0..93 of the byte tokenizer are the printable ASCII characters '!'..'~'


def engine_overrides(w: Workload, model: str, algo: str, steps: int, device: str) -> list[str]:
    """The command-line overrides of a training run on workload `w` (what `engine.main_ppo` would get)."""
    seqs = w.sequences
    o = {
        "data.train_files": "unused.parquet",  # the bench feeds prompts itself
        "data.train_batch_size": w.prompts,
        "data.max_prompt_length": w.prompt_len,
        "data.max_response_length": w.response_len,
        "actor_rollout_ref.model.path": model,
        "actor_rollout_ref.actor.optim.lr": w.lr,
        "actor_rollout_ref.actor.ppo_mini_batch_size": w.prompts,  # one optimizer step per generation batch
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": w.micro,
        "actor_rollout_ref.actor.ppo_epochs": 1,
        "actor_rollout_ref.actor.use_kl_loss": True,
        "actor_rollout_ref.actor.kl_loss_coef": w.kl_coef,
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",  # k3, as TRL's beta term
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": w.micro * (w.prompt_len + w.response_len),
        "actor_rollout_ref.rollout.n": w.n,
        "actor_rollout_ref.rollout.temperature": 1.0,
        "actor_rollout_ref.rollout.top_p": 1.0,
        "actor_rollout_ref.rollout.top_k": -1,
        # fixed-length answers unless the model says its end token (eos_rate: answers of different lengths)
        "actor_rollout_ref.rollout.min_new_tokens": 0 if w.eos_rate > 0 else w.response_len,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": w.micro,
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": w.micro * (w.prompt_len + w.response_len),
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": w.micro,
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": w.micro * (w.prompt_len + w.response_len),
        "algorithm.adv_estimator": "grpo" if algo == "grpo" else "gae",
        "trainer.n_gpus_per_node": 1,
        "trainer.nnodes": 1,
        "trainer.device": device,
        "trainer.logger": "[]",
        "trainer.total_training_steps": steps,
        "trainer.save_freq": -1,
        "trainer.test_freq": -1,
        "trainer.val_before_train": False,
        "trainer.balance_batch": False,
    }
    if algo == "ppo":
        o.update({"critic.model.path": model, "critic.ppo_micro_batch_size_per_gpu": w.micro,
                  "critic.forward_micro_batch_size_per_gpu": w.micro, "critic.optim.lr": 1e-5,
                  "critic.ppo_max_token_len_per_gpu": w.micro * (w.prompt_len + w.response_len),
                  "critic.forward_max_token_len_per_gpu": w.micro * (w.prompt_len + w.response_len)})
    assert seqs > 0
    return [f"{k}={v}" for k, v in o.items()]


def make_prompts(w: Workload, tokenizer, seed: int):
    from engine.data.dataset import collate

    if w.prompt_source == "gsm8k":
        rows = [tokenizer(t)["input_ids"] for t in prompt_texts(w, tokenizer, seed)]
    else:
        rows = prompt_token_ids(w, ASCII_IDS, seed).tolist()
    items = [{"input_ids": row, "data_source": "bench", "prompt_index": i} for i, row in enumerate(rows)]
    return collate(items, tokenizer.pad_token_id)


def run_engine(w: Workload, algo: str, warmup: int, steps: int, device: str, extra: list[str], log) -> dict:
    """Runs warmup + steps train steps of workload `w`; returns per-phase medians and the raw step metrics."""
    from transformers import AutoTokenizer

    from engine.config import build_config
    from engine.config.frozen import editable_copy, freeze
    from engine.reward.manager import RewardManager
    from engine.trainer.ppo_trainer import PPOTrainer
    from engine.workers.launch import start_workers
    from engine.workers.profiling import profile_root

    model = model_dir(w)
    total = warmup + steps
    cfg = editable_copy(build_config(engine_overrides(w, model, algo, total, device) + list(extra)))
    cfg.trainer.profile_dir = profile_root(cfg.trainer) or cfg.trainer.profile_dir  # trainer.profile_steps=[N]
    freeze(cfg)
    tokenizer = AutoTokenizer.from_pretrained(model)
    reward_fn = RewardManager(tokenizer, bench_score)
    workers = trainer = probe = None
    records: list[dict] = []
    try:
        t0 = time.perf_counter()
        workers = start_workers(cfg, total, device)  # one worker: in this process unless ray_init.mode=ray
        info = workers.info
        log({"event": "engine_ready", "seconds": round(time.perf_counter() - t0, 1), "launcher": workers.launcher,
             **info})
        mode = cfg.trainer.v1.trainer_mode if cfg.trainer.use_v1 else "sync"
        # the async modes (trainer.v1.trainer_mode): their driver pulls the prompts from a loader, ahead of the step
        loader = None if mode == "sync" else _Prompts(w, tokenizer)
        trainer = PPOTrainer(cfg, tokenizer, loader, None, reward_fn, reward_fn, workers.group, _NullLogger(), total,
                             device_name=info.get("device_name"), n_params=info.get("n_params"))
        lengths: list[list[int]] = []  # each step's response lengths (real tokens, end token included)
        scored = trainer.batches.scored

        def recording(prompts, step, log_):
            selection = scored(prompts, step, log_)
            lengths.append(selection.batch["response_mask"].sum(-1).tolist())
            return selection

        trainer.batches.scored = recording
        probe = StepProbe(enabled=workers.launcher == "in-process").start()
        wall = time.perf_counter()
        for step in range(total):
            prompts = make_prompts(w, tokenizer, seed=step) if loader is None else trainer.batches.prompts(step + 1)
            trainer.global_step = step + 1
            metrics, _ = trainer.train_step(prompts)
            # the step's wall time between two step ends: with the rollout ahead, timing_s/step is the wait for
            # the batch + the training, and the generation that overlapped it is not in it
            now = time.perf_counter()
            metrics["timing_s/step_wall"], wall = now - wall, now
            metrics |= probe.sample()  # the update's micro-batch plan, allocator and compile counts this step
            metrics = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
            metrics["warmup"] = step < warmup
            records.append(metrics)
            log({"event": "step", "step": step + 1, "warmup": step < warmup,
                 **{k: round(v, 4) for k, v in metrics.items()
                    if k.startswith(("timing_s/", "perf/mfu", "response_length/mean", "probe/", STALE))}})
        memory = workers.group.all_call("memory_stats")[0]
    finally:
        if probe is not None:
            probe.stop()
        if trainer is not None:
            trainer.batches.close()  # the async modes: stop the rollout thread
        if workers is not None:
            workers.stop()
    result = summarize(w, algo, records, memory, info.get("n_params"), info.get("device_name"))
    result["response_lengths"] = [n for step in lengths[warmup:] or lengths for n in step]
    result["n_trainable_params"] = info.get("n_trainable_params")
    return result


def summarize(w: Workload, algo: str, records: list[dict], memory: dict, n_params, device_name) -> dict:
    from engine.trainer.metrics import mfu

    measured = [r for r in records if not r["warmup"]] or records
    # real (non-padding) tokens: each step's mean prompt and response lengths × sequences; tokens/s of a
    # phase is its step's real tokens over its time
    seqs = w.sequences
    phases = {}
    for name in ("gen", "old_log_prob", "ref", "values", "update_critic", "update_actor", "step", "step_wall"):
        key = f"timing_s/{name}"
        runs = [r for r in measured if key in r]
        if not runs:
            continue
        values = [r[key] for r in runs]
        t = statistics.median(values)
        resp = statistics.mean(r.get("response_length/mean", w.response_len) for r in runs) * seqs
        prompt = statistics.mean(r.get("prompt_length/mean", w.prompt_len) for r in runs) * seqs
        tokens_all, tokens_resp = prompt + resp, resp
        tokens = tokens_resp if name == "gen" else tokens_all
        phase = {"phase": name, "timing_s": round(t, 4), "tokens_per_s": round(tokens / t, 1),
                 "runs": [round(v, 4) for v in values]}
        if name.startswith("step"):  # the run's throughput: real answer tokens per second of step
            phase["answer_tokens_per_s"] = round(tokens_resp / t, 1)
        if name == "update_actor" and n_params:
            value = mfu(n_params, tokens_all, t, device_name, 1)
            phase["mfu"] = round(value, 4) if value is not None else None
        if name == "update_actor":  # per step: the swing between steps and what each update ran with
            phase["mfu_runs"] = [round(r["perf/mfu/actor"], 4) for r in runs if "perf/mfu/actor" in r] or None
            for key in sorted({k for r in runs for k in r if k.startswith("probe/")}):
                phase[key.removeprefix("probe/") + "_runs"] = [int(r[key]) if key in r else None for r in runs]
        phases[name] = phase
    mismatch = [r["training/rollout_probs_diff_mean"] for r in measured if "training/rollout_probs_diff_mean" in r]
    lp_diff = [r["actor/rollout_log_probs_absdiff"] for r in measured if "actor/rollout_log_probs_absdiff" in r]
    return {"phases": phases, "memory": memory, "n_params": n_params, "device": device_name,
            "rollout_probs_diff_mean": statistics.mean(mismatch) if mismatch else None,
            "rollout_log_probs_absdiff_mean": statistics.mean(lp_diff) if lp_diff else None,
            "response_length_mean": statistics.mean(r.get("response_length/mean", 0) for r in measured),
            "actor_kl_loss": statistics.mean(r.get("actor/kl_loss", 0) for r in measured),
            "staleness_mean": statistics.mean(r[STALE] for r in measured) if all(STALE in r for r in measured)
            else None}


STALE = "training/off_policy/trajectory_staleness/mean"


class _Prompts:
    """The async driver's loader: step k's prompts are the sync bench's (seed k), so both modes see the same."""

    def __init__(self, w: Workload, tokenizer):
        self.w, self.tokenizer, self.drawn = w, tokenizer, 0

    def __next__(self):
        self.drawn += 1
        return make_prompts(self.w, self.tokenizer, seed=self.drawn - 1)

    def state_dict(self) -> dict:
        return {"drawn": self.drawn}

    def load_state_dict(self, state: dict) -> None:
        self.drawn = int(state["drawn"])


class _NullLogger:
    def __getattr__(self, name):
        return lambda *a, **k: None

