"""Entry point: `python -m engine.main_ppo [--config-name NAME] key=value ...` (verl's command line), or
`python -m engine.main_ppo --config-file PATH` for a config resolved already (the server's runs: see
engine/config/argv.py).

Runs on one machine (one worker in this process, or a local Ray for several) or under `ray job submit` on
an existing cluster (engine/workers/launch.py decides). From Python: `engine.train` (engine/api.py).
Every user mistake found before workers start ends with a one-paragraph message and exit code 2.
"""
from __future__ import annotations

import os
import sys
import traceback

import torch

from engine.config import ConfigError, PPOConfig, config_from_argv, uses_reference, world_size
from engine.rollout import registry as rollout_registry


class UserError(Exception):
    """A problem the user fixes in the config or the data; printed without a traceback."""


def pick_device(cfg: PPOConfig) -> str:
    if cfg.trainer.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if cfg.trainer.device == "cuda" and not torch.cuda.is_available():
        raise UserError("trainer.device=cuda but no CUDA device is visible here; use trainer.device=cpu or auto.")
    return cfg.trainer.device


def prepare(cfg: PPOConfig):
    """Everything that can fail because of the user's input, before any worker starts."""
    from transformers import AutoTokenizer

    from engine.builtins import resolve_builtins
    from engine.data.dataset import PromptLoader, RLDataset
    from engine.models.paths import check_model_path
    from engine.reward.manager import RewardManager

    resolve_builtins(cfg)
    from engine.workers.profiling import profile_root

    cfg.trainer.profile_dir = profile_root(cfg.trainer) or cfg.trainer.profile_dir
    actor_rollout_ref = cfg.actor_rollout_ref
    rollout = actor_rollout_ref.rollout
    rollout_registry.check_device(rollout, cfg.trainer.device)  # trainer.device=auto: known only now
    actor_rollout_ref.model.path = check_model_path(actor_rollout_ref.model.path, "actor_rollout_ref.model.path")
    if cfg.critic.enable:
        cfg.critic.model.path = check_model_path(cfg.critic.model.path, "critic.model.path")
    tokenizer = AutoTokenizer.from_pretrained(os.path.expanduser(cfg.data.tokenizer or actor_rollout_ref.model.path),
                                              trust_remote_code=actor_rollout_ref.model.trust_remote_code)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    data = cfg.data
    common = dict(prompt_key=data.prompt_key, max_prompt_length=data.max_prompt_length, truncation=data.truncation,
                  filter_overlong_prompts=data.filter_overlong_prompts, reward_fn_key=data.reward_fn_key,
                  chat_template=actor_rollout_ref.model.custom_chat_template,
                  return_raw_chat=data.return_raw_chat)  # the chat messages as meta `raw_prompt`
    train_ds = RLDataset(data.train_files, tokenizer, **common)
    val_ds = None
    if data.val_files:
        val_ds = RLDataset(data.val_files, tokenizer, **common)
        if data.val_max_samples and data.val_max_samples < len(val_ds):
            val_ds.items = val_ds.items[: data.val_max_samples]
    loader = PromptLoader(train_ds, data.train_batch_size, shuffle=data.shuffle, seed=data.seed)
    steps_per_epoch = len(loader)
    total_steps = cfg.trainer.total_training_steps or steps_per_epoch * cfg.trainer.total_epochs

    compute_score = None
    crf = cfg.custom_reward_function
    if crf.path:
        from engine.reward.custom import load_custom_reward_fn

        compute_score = load_custom_reward_fn(crf.path, crf.name, crf.reward_kwargs)
    # without a custom function, reward_kwargs go to the built-in scorer (e.g. GSM8K's {lenient: true, method: ...})
    rm_kwargs = cfg.reward_model.reward_kwargs
    reward_fn = RewardManager(tokenizer, compute_score, data.reward_fn_key,
                              reward_kwargs=None if crf.path else crf.reward_kwargs,
                              overlong_buffer=rm_kwargs.overlong_buffer_cfg if cfg.reward_model.reward_manager == "dapo"
                              else None, max_resp_len=rm_kwargs.max_resp_len)
    trial_score(reward_fn, train_ds)
    if cfg.reward_model.enable:  # the model itself loads on the workers (engine/workers/build.py)
        cfg.reward_model.model.path = check_model_path(cfg.reward_model.model.path or "", "reward_model.model.path")
    return tokenizer, loader, val_ds, reward_fn, total_steps


def trial_score(reward_fn, dataset) -> None:
    """Score one empty answer to the first prompt, so a reward function that cannot run at all fails now,
    before any worker starts, rather than after the first generation."""
    item = dataset[0]
    kwargs = dict(data_source=item.get(reward_fn.reward_fn_key, item.get("data_source")), solution_str="",
                  ground_truth=item.get("ground_truth"), extra_info=item.get("extra_info"), **reward_fn.reward_kwargs)
    try:
        reward_fn.compute_score(**kwargs)
    except NotImplementedError as exc:
        raise UserError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - the user's code; report it briefly
        name = getattr(reward_fn.compute_score, "__name__", "reward function")
        raise UserError(f"The reward function {name} raised {type(exc).__name__}: {exc} on a trial call "
                        f"(data_source={kwargs['data_source']!r}, empty response). Fix the function "
                        f"(custom_reward_function.path / .name) so it returns a number for any response.") from None


def run(cfg: PPOConfig, loggers: tuple = ()) -> int:
    """Train under `cfg`; returns the last step trained. `loggers`: more Logger objects beside trainer.logger's."""
    from engine.loggers import build_loggers
    from engine.trainer.ppo_trainer import PPOTrainer
    from engine.workers.launch import start_workers, uses_ray

    uses_ray(cfg)  # a worker count that ray_init.mode cannot run fails here, before anything loads
    device = pick_device(cfg)
    cfg.trainer.device = device
    tokenizer, loader, val_ds, reward_fn, total_steps = prepare(cfg)
    val_reward_fn = reward_fn
    logger = build_loggers(cfg, total_steps, progress=sys.stderr.isatty())
    logger.loggers.extend(loggers)
    workers = None
    try:
        workers = start_workers(cfg, total_steps, device)
        roles = ["actor", "rollout"] + (["reference"] if uses_reference(cfg) else [])
        roles += ["critic"] if cfg.critic.enable else []
        roles += ["reward_model"] if cfg.reward_model.enable else []  # on the workers, beside the reference
        # the run's facts (the run page shows them): n_params / n_trainable_params are the actor's (fewer train
        # with LoRA, all of them in full fine-tuning); critic_n_params / critic_n_trainable_params the critic's, when
        # the run has one
        critic = {k: workers.info[k] for k in ("critic_n_params", "critic_n_trainable_params") if k in workers.info}
        logger.log_status("started", workers=world_size(cfg), device=device, roles="+".join(roles),
                          total_steps=total_steps, launcher=workers.launcher,
                          device_name=workers.info.get("device_name"), n_params=workers.info.get("n_params"),
                          n_trainable_params=workers.info.get("n_trainable_params"), **critic,
                          placement=workers.info.get("placement"))
        # the async modes (verl's colocate_async / separate_async, engine/trainer/ASYNC.md): the trainer takes its
        # batches from a rollout thread (engine/trainer/batches.py)
        trainer = PPOTrainer(cfg, tokenizer, loader, val_ds, reward_fn, val_reward_fn, workers.group, logger,
                             total_steps, device_name=workers.info.get("device_name"),
                             n_params=workers.info.get("n_params"))
        trainer.fit()
        logger.log_status("succeeded", step=trainer.global_step)
        return trainer.global_step
    except BaseException as exc:
        logger.log_status("failed", error=f"{type(exc).__name__}: {exc}"[:2000])
        raise
    finally:
        logger.close()
        if workers is not None:
            workers.stop()


USER_ERRORS = (ConfigError, UserError, FileNotFoundError)


def _is_user_error(exc: BaseException) -> bool:
    names = {"DataError", "RewardFunctionError", "ResourceError", "RewardComputeError", "NotImplementedError",
             "RolloutSetupError"}
    return isinstance(exc, USER_ERRORS) or type(exc).__name__ in names


USAGE = """usage: python -m engine.main_ppo [--config-path DIR] [--config-name NAME] key=value ...
       python -m engine.main_ppo --config-file PATH

Trains with verl's config keys (e.g. data.train_files=... actor_rollout_ref.model.path=... trainer.total_epochs=1).
  --config-name NAME   a named config or preset to lay the overrides over (engine/configs/)
  --config-path DIR    where to look for NAME (a verl-style YAML folder)
  --config-file PATH   a config resolved already (runs as it is; no overrides)
Every key, its default and its meaning:   python -m engine.config --json-schema
The config a command line resolves to:    python -m engine.config key=value ..."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(arg in ("-h", "--help") for arg in argv):  # a flag, not a malformed override
        print(USAGE)
        return 0
    try:
        cfg = config_from_argv(argv)
        run(cfg)
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001
        cause = getattr(exc, "cause", None)  # an error raised inside a worker arrives wrapped by Ray
        if isinstance(cause, BaseException) and _is_user_error(cause):
            exc = cause
        if _is_user_error(exc):
            print(f"Error: {exc}", file=sys.stderr)
            return 2
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
