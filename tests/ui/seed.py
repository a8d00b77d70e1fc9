"""Put runs, metrics, samples and log lines into a running server through its public API (the same ingest
routes the engine's dashboard logger uses), for UI tests and the benchmark."""
from __future__ import annotations

import json
import math
import random
import time
import urllib.error
import urllib.request


class Api:
    def __init__(self, base_url: str, token: str | None = None):
        self.base = base_url.rstrip("/")
        self.token = token  # the server's API token, when it has one (ingest calls use the run's own token)

    def call(self, method: str, path: str, body=None, token: str | None = None, timeout: float = 60):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if token or self.token:
            req.add_header("Authorization", f"Bearer {token or self.token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
                return json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{method} {path} -> {exc.code}: {exc.read().decode()[:500]}") from None

    def get(self, path: str, timeout: float = 60):
        return self.call("GET", path, timeout=timeout)

    def external_run(self, name: str, *, preset: str | None = "demo", config: dict | None = None,
                     overrides: list[str] | None = None, experiment: str = "ui-tests", tags=()) -> dict:
        """A run driven from outside (launch=false): the server records it and returns its ingest token."""
        return self.call("POST", "/api/v1/runs", {"name": name, "preset": preset, "config": config or {},
                                                 "overrides": overrides or [], "experiment_name": experiment,
                                                 "tags": list(tags), "launch": False})

    def metrics(self, run: dict, points: list[dict]):
        for i in range(0, len(points), 10_000):
            self.call("POST", f"/api/v1/runs/{run['id']}/metrics", {"points": points[i:i + 10_000]},
                      token=run.get("ingest_token"))

    def samples(self, run: dict, samples: list[dict]):
        for i in range(0, len(samples), 1000):
            self.call("POST", f"/api/v1/runs/{run['id']}/samples", {"samples": samples[i:i + 1000]},
                      token=run.get("ingest_token"))

    def logs(self, run: dict, lines: list[str], start: int = 0):
        self.call("POST", f"/api/v1/runs/{run['id']}/logs",
                  {"source": "engine", "lines": [{"seq": start + i, "text": t} for i, t in enumerate(lines)]},
                  token=run.get("ingest_token"))

    def status(self, run: dict, status: str, **fields):
        self.call("POST", f"/api/v1/runs/{run['id']}/status", {"status": status, "fields": fields},
                  token=run.get("ingest_token"))


def step_metrics(step: int, total: int, rng: random.Random, *, kl_scale: float = 0.03, wall: float | None = None) -> list[dict]:
    """One training step's metrics under verl's names, shaped like a run that learns."""
    progress = step / max(total, 1)
    wall = wall if wall is not None else time.time()
    values = {
        "critic/score/mean": min(1.0, 0.2 + 0.6 * progress + rng.uniform(-0.05, 0.05)),
        "critic/rewards/mean": min(1.0, 0.2 + 0.6 * progress + rng.uniform(-0.05, 0.05)),
        "actor/pg_loss": rng.uniform(-0.05, 0.05),
        "critic/vf_loss": 0.5 * math.exp(-3 * progress) + rng.uniform(0, 0.02),
        "actor/reward_kl_penalty": kl_scale * (0.3 + progress) + rng.uniform(0, 0.005),
        "actor/ppo_kl": rng.uniform(0, 0.01),
        "actor/entropy": 1.2 - 0.5 * progress + rng.uniform(-0.02, 0.02),
        "response_length/mean": 6 + 2 * progress,
        "response_length/max": 8,
        "response_length/clip_ratio": 0.1 + rng.uniform(0, 0.05),
        "actor/grad_norm": 1 + rng.uniform(0, 0.5),
        "critic/grad_norm": 2 + rng.uniform(0, 0.5),
        "actor/lr": 1e-6,
        "critic/values/std": 0.2 + rng.uniform(0, 0.05),
        "timing_s/gen": 1.0 + rng.uniform(0, 0.2),
        "timing_s/reward": 0.1,
        "timing_s/old_log_prob": 0.3,
        "timing_s/ref": 0.3,
        "timing_s/values": 0.2,
        "timing_s/adv": 0.01,
        "timing_s/update_critic": 0.5,
        "timing_s/update_actor": 0.6,
        "timing_s/step": 3.0,
        "perf/throughput": 500 + rng.uniform(0, 50),
        "training/global_step": step,
        "training/total_steps": total,
    }
    return [{"key": k, "step": step, "value": v, "wall_time": wall} for k, v in values.items()]


def step_samples(step: int, rng: random.Random, *, prompts: int = 4, n: int = 4, good: float = 0.5) -> list[dict]:
    """A GRPO-shaped step: `prompts` arithmetic prompts x `n` answers, with per-token arrays."""
    out = []
    for p in range(prompts):
        a, b = 10 + p * 7, 3 + p * 5
        truth = str(a + b)
        for k in range(n):
            correct = rng.random() < good
            answer = truth if correct else str(a + b + rng.choice([-2, -1, 1, 2]))
            response = f"{a} + {b} = {answer} #### {answer}"
            tokens = response.split(" ")
            out.append({
                "step": step, "split": "train", "sample_index": p * n + k, "prompt_index": p,
                "group_uid": f"s{step}-p{p}", "prompt": f"What is {a} + {b}?", "response": response,
                "score": 1.0 if correct else 0.0, "reward": 1.0 if correct else 0.0, "ground_truth": truth,
                "data_source": "arith", "tokens": tokens,
                "old_log_probs": [-rng.uniform(0, 2) for _ in tokens],
                "ref_log_probs": [-rng.uniform(0, 2) for _ in tokens],
                "advantages": [(1.0 if correct else -1.0) * 0.5 for _ in tokens],
            })
    return out
