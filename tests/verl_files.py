"""A verl run's files written by verl's own code (verl 0.9.1, installed for the tests): the `file` logger's JSONL
(`verl.utils.tracking.FileLogger`), the `tensorboard` logger's event files (`_TensorboardAdapter`) and the
generation dumps (`RayPPOTrainer._write_generations`, taken from verl's installed source: importing its trainer
module needs GPU-side packages the tests do not install, the function itself needs only `os` and `json`)."""
from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
from contextlib import contextmanager
from pathlib import Path

VAL_KEY = "val-core/openai/gsm8k/reward/mean@1"


@contextmanager
def _env(**values: str):
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def step_metrics(step: int, nan_at: int | None = None) -> dict:
    """What verl's PPO trainer logs at a step (a subset of its keys, its names), numbers as numpy gives them."""
    import numpy as np

    data = {"training/global_step": step, "training/epoch": 0,
            "critic/score/mean": np.float64(0.1 * step), "critic/rewards/mean": np.float32(0.1 * step),
            "actor/pg_loss": float("nan") if step == nan_at else np.float64(-0.01 * step),
            "actor/entropy": np.float64(1.0 / step), "actor/kl_loss": np.float64(0.001 * step),
            "response_length/mean": np.float64(100 + step), "timing_s/gen": np.float64(0.5),
            "timing_s/step": np.float64(1.5), "perf/throughput": np.float64(1000.0 + step)}
    if step % 2 == 0:
        data[VAL_KEY] = np.float64(0.2 + 0.05 * step)
    return data


def write_file_logger(path: Path, steps: int, nan_at: int | None = None) -> Path:
    """`trainer.logger=['file']` with VERL_FILE_LOGGER_PATH=path: one line per step."""
    from verl.utils.tracking import FileLogger

    with _env(VERL_FILE_LOGGER_PATH=str(path)):
        logger = FileLogger("rlstudio-tests", "import")
    for step in range(1, steps + 1):
        logger.log(data=step_metrics(step, nan_at), step=step)
    logger.finish()
    return path


def write_tensorboard(directory: Path, steps: int) -> list[Path]:
    """`trainer.logger=['tensorboard']` with TENSORBOARD_DIR=directory."""
    from verl.utils.tracking import _TensorboardAdapter

    with _env(TENSORBOARD_DIR=str(directory)):
        adapter = _TensorboardAdapter("rlstudio-tests", "import")
    for step in range(1, steps + 1):
        adapter.log(data={k: float(v) for k, v in step_metrics(step).items()}, step=step)
    adapter.finish()
    return sorted(directory.glob("events.out.tfevents.*"))


def _verl_write_generations():
    """verl's own `RayPPOTrainer._write_generations` (a staticmethod), compiled from its installed source."""
    source_path = Path(importlib.util.find_spec("verl").origin).parent / "trainer" / "ppo" / "ray_trainer.py"
    tree = ast.parse(source_path.read_text())
    trainer = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RayPPOTrainer")
    function = next(n for n in trainer.body if isinstance(n, ast.FunctionDef) and n.name == "_write_generations")
    function.decorator_list = []
    namespace = {"os": os, "json": json}
    code = compile(ast.Module(body=[function], type_ignores=[]), str(source_path), "exec")
    exec(code, namespace)  # noqa: S102 - verl's own function, from its installed source
    return namespace["_write_generations"]


def prompt(i: int) -> str:
    return f"<|im_start|>user\nWhat is {i} + {i}? Let's think step by step.<|im_end|>\n<|im_start|>assistant\n"


def write_generations(directory: Path, step: int, prompts: int = 3, n: int = 2) -> Path:
    """One step's dump as verl writes it (`trainer.rollout_data_dir` or `validation_data_dir`): `n` answers to
    each prompt, with the reward's extra info (`acc`, `pred`)."""
    inputs, outputs, gts, scores, acc, pred = [], [], [], [], [], []
    for i in range(prompts):
        for j in range(n):
            right = (i + j + step) % 2 == 0
            inputs.append(prompt(i))
            outputs.append(f"{i} + {i} = {2 * i if right else 2 * i + 1}. #### {2 * i if right else 2 * i + 1}")
            gts.append(str(2 * i))
            scores.append(1.0 if right else 0.0)
            acc.append(right)
            pred.append(str(2 * i if right else 2 * i + 1))
    _verl_write_generations()(inputs, outputs, gts, scores, {"acc": acc, "pred": pred}, str(directory), step)
    return directory / f"{step}.jsonl"


def hydra_config(directory: Path, experiment_name: str = "qwen_gsm8k_grpo") -> Path:
    """A verl run's `.hydra/config.yaml` as Hydra saves it: the composed tree, interpolations as written."""
    from omegaconf import OmegaConf

    tree = {"data": {"train_batch_size": 8, "max_prompt_length": 512, "max_response_length": 256},
            "actor_rollout_ref": {"model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"},
                                  "actor": {"optim": {"lr": 1e-6}, "ppo_mini_batch_size": 4},
                                  "rollout": {"name": "vllm", "n": 2, "response_length": "${data.max_response_length}"}},
            "algorithm": {"adv_estimator": "grpo", "gamma": 1.0},
            "trainer": {"project_name": "rlstudio-tests", "experiment_name": experiment_name,
                        "total_training_steps": 6, "logger": ["console", "file"]}}
    path = directory / ".hydra" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(tree), path)
    return path


def verl_run(directory: Path, steps: int = 6, nan_at: int | None = 3) -> dict[str, Path | list[Path]]:
    """A whole verl run's outputs in `directory`: metrics.jsonl beside .hydra/, rollout/ and validation/ dumps."""
    directory.mkdir(parents=True, exist_ok=True)
    metrics = write_file_logger(directory / "metrics.jsonl", steps, nan_at)
    config = hydra_config(directory)
    rollout = [write_generations(directory / "rollout", step) for step in range(1, steps + 1)]
    validation = [write_generations(directory / "validation", step, prompts=2, n=1) for step in (0, steps)]
    return {"metrics": metrics, "config": config, "rollout": rollout, "validation": validation}


def expected_value(step: int, key: str, nan_at: int | None = 3) -> float | None:
    value = step_metrics(step, nan_at).get(key)
    return None if value is None else float(value)


def same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-6)
