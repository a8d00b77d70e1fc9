"""Per-step metrics under verl's names, computed on the driver from the step's batch and timings."""
from __future__ import annotations

import math

import numpy as np
import torch

from engine import metric_names
from engine.protocol import Batch
from engine.trainer.rollout_mismatch import exact_metrics, rollout_mismatch_metrics
from engine.trainer.samples import group_advantage_stats

# Peak dense bf16 FLOP/s by device name, for MFU (the datasheet figures MFU is conventionally quoted on).
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 125e12}


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    values = values.float()
    if values.numel() == 0:
        return {}
    return {f"{prefix}/mean": values.mean().item(), f"{prefix}/max": values.max().item(),
            f"{prefix}/min": values.min().item()}


def data_metrics(batch: Batch, use_critic: bool, max_response_length: int) -> dict[str, float]:
    mask = batch["response_mask"].float()
    prompt_mask = batch["attention_mask"][:, : batch["prompts"].shape[1]].float()
    valid = mask.bool()
    seq_scores = batch["token_level_scores"].sum(-1)
    seq_rewards = batch["token_level_rewards"].sum(-1)
    response_length = mask.sum(-1)
    prompt_length = prompt_mask.sum(-1)
    m: dict[str, float] = {}
    m.update(_stats("critic/score", seq_scores))
    m.update(_stats("critic/rewards", seq_rewards))
    m.update(_stats("critic/advantages", batch["advantages"][valid]))
    m.update(_stats("critic/returns", batch["returns"][valid]))
    if use_critic:
        values = batch["values"][valid]
        m.update(_stats("critic/values", values))
        returns = batch["returns"][valid]
        var_returns = torch.var(returns)
        m["critic/vf_explained_var"] = (1.0 - torch.var(returns - values) / (var_returns + 1e-5)).item()
        m[metric_names.VALUES_STD] = values.std().item() if values.numel() > 1 else 0.0
    m.update(_stats("response_length", response_length))
    m[metric_names.RESPONSE_CLIP_RATIO] = (response_length >= max_response_length).float().mean().item()
    m.update(_stats("prompt_length", prompt_length))
    m["prompt_length/clip_ratio"] = 0.0
    return m


def timing_metrics(timings: dict[str, float], batch: Batch) -> dict[str, float]:
    n_resp = batch["response_mask"].sum().item()
    n_prompt = batch["attention_mask"][:, : batch["prompts"].shape[1]].sum().item()
    n_all = n_resp + n_prompt
    m = {f"{metric_names.TIMING_PREFIX}{k}": v for k, v in timings.items()}
    per_token_denominator = {"gen": n_resp, "reward": n_all, "old_log_prob": n_all, "ref": n_all, "values": n_all,
                             "adv": n_all, "update_critic": n_all, "update_actor": n_all}
    for k, v in timings.items():
        if k in per_token_denominator and per_token_denominator[k] > 0:
            m[f"timing_per_token_ms/{k}"] = v * 1000 / per_token_denominator[k]
    return m


def throughput_metrics(timings: dict[str, float], batch: Batch, world: int) -> dict[str, float]:
    n_tokens = int(batch["attention_mask"].sum().item())
    step_time = timings.get("step", 0.0) or 1e-9
    return {"perf/total_num_tokens": n_tokens, "perf/time_per_step": step_time,
            "perf/throughput": n_tokens / step_time / world}


def mfu(n_params: int, n_tokens: int, seconds: float, device_name: str | None, world: int, passes: float = 3.0):
    """Model FLOPs utilisation: 2·N FLOPs per token per forward, ×3 for forward+backward."""
    if not device_name or seconds <= 0:
        return None
    peak = next((v for k, v in PEAK_FLOPS.items() if k in device_name), None)
    if peak is None:
        return None
    return 2.0 * n_params * n_tokens * passes / seconds / (peak * world)


# The rollout's weight checks (engine/rollout/freshness.py) are the step's worst check, as within one call: DAPO's
# refills call the rollout again in the step and their checks see no move since the first, which a mean would dilute
WORST_CHECKS = (metric_names.WEIGHTS_STALE, metric_names.WEIGHT_FINGERPRINT_GAP, metric_names.ACTOR_WEIGHT_CHANGE,
                metric_names.STALE_PARAMS)


# counts of what some worker did, as its max: partial rollout's mid-batch loads (each worker switches on its own)
WORKERS_MAX = ("rollout/partial_switches",)


def reduce_worker_metrics(metrics: dict[str, list[float]]) -> dict[str, float]:
    out = {}
    for k, v in metrics.items():
        if k.startswith("_"):
            continue
        vals = [x for x in v if x is not None]
        if not vals:
            continue
        worst = k.endswith(metric_names.GRAD_NORM_NONFINITE) or k in WORST_CHECKS or k in WORKERS_MAX
        out[k] = float(np.max(vals)) if worst else float(np.mean(vals))
    if "_entropy_sum" in metrics:
        count = sum(metrics["_entropy_count"])
        out[metric_names.ENTROPY] = sum(metrics["_entropy_sum"]) / count if count else math.nan
    return out


def step_metrics(batch: Batch, log, reward, *, use_critic: bool, max_response_length: int, world: int,
                 n_params: int | None, device_name: str | None, ppo_epochs: int,
                 exact: bool = False) -> dict[str, float]:
    """Everything a training step reports: the driver's metrics in `log`, the workers' reduced over workers,
    the batch's data, timing, throughput and MFU, and a custom reward's numeric extras. `exact`: exact mode, whose
    old log-probs are the rollout's own: the mismatch comes from the update's check instead."""
    metrics = dict(log.metrics)
    metrics.update(reduce_worker_metrics(log.worker))
    # rollout vs actor log-probs ({} for hf generate); the rollout correction's own rollout_corr/* win
    metrics = (exact_metrics(log.worker) if exact else rollout_mismatch_metrics(batch)) | metrics
    metrics.update(data_metrics(batch, use_critic, max_response_length))
    metrics.update(group_advantage_stats(batch))
    metrics.update(timing_metrics(log.timings, batch))
    metrics.update(throughput_metrics(log.timings, batch, world))
    if "update_actor" in log.timings and n_params:
        tokens = int(batch["attention_mask"].sum().item()) * ppo_epochs
        value = mfu(n_params, tokens, log.timings["update_actor"], device_name, world)
        if value is not None:
            metrics["perf/mfu/actor"] = value
    for k, v in reward.extra.items():  # numeric extras of a custom reward become metrics
        nums = [x for x in v if isinstance(x, (int, float)) and not isinstance(x, bool)]
        if nums and len(nums) == len(v):
            metrics[f"reward_extra/{k}/mean"] = sum(nums) / len(nums)
    return metrics
