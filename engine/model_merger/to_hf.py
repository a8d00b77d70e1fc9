"""Checkpoint folder -> full weights -> HF model directory; every mistake in the arguments is a MergerError
that names the argument and the fix."""
from __future__ import annotations

import json
import os
import re
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads only once the arguments are checked: a wrong one is answered at once
    import torch

from engine.checkpoint.export import HF_FILES_DIR

STEP_DIR = re.compile(r"global_step_(\d+)$")
HINT = "point --local_dir at <trainer.default_local_dir>/global_step_N/actor (or .../critic)"


class MergerError(Exception):
    """A wrong argument; printed as one line, exit code 2."""


def _saved_steps(root: str) -> list[int]:
    if not os.path.isdir(root):
        return []
    return sorted(int(m.group(1)) for d in os.listdir(root) if (m := STEP_DIR.match(d)) and
                  os.path.isdir(os.path.join(root, d)))


def _steps_text(root: str) -> str:
    steps = _saved_steps(root)
    return f"saved steps there: {', '.join(map(str, steps))}" if steps else "no global_step_N folders there"


def check_local_dir(local_dir: str | None) -> str:
    """The role folder of a checkpoint (it holds DCP's .metadata), or a MergerError saying what to pass."""
    if not local_dir:
        raise MergerError(f"--local_dir is required: {HINT}")
    path = os.path.abspath(os.path.expanduser(local_dir))
    if os.path.isfile(os.path.join(path, ".metadata")):
        return path
    parent, name = os.path.split(path)
    if not os.path.exists(path):
        step = STEP_DIR.search(os.path.basename(parent))
        if step and not os.path.isdir(parent):  # .../global_step_7/actor with no global_step_7
            root = os.path.dirname(parent)
            raise MergerError(f"--local_dir {local_dir}: there is no step {step.group(1)} in {root} "
                              f"({_steps_text(root)}); pick one of those steps")
        if step:
            roles = sorted(d for d in os.listdir(parent) if os.path.isdir(os.path.join(parent, d)))
            raise MergerError(f"--local_dir {local_dir}: {os.path.basename(parent)} has no '{name}' folder "
                              f"(it has: {', '.join(roles) or 'nothing'}); use .../actor or .../critic")
        raise MergerError(f"--local_dir {local_dir}: no such folder; {HINT}")
    if not os.path.isdir(path):
        raise MergerError(f"--local_dir {local_dir} is a file, not a checkpoint folder; {HINT}")
    if STEP_DIR.search(name):
        raise MergerError(f"--local_dir {local_dir} is a whole step; add the role: --local_dir {local_dir}/actor "
                          "(or /critic)")
    steps = _saved_steps(path)
    if steps:
        raise MergerError(f"--local_dir {local_dir} is the checkpoint root; name a step and a role, e.g. "
                          f"--local_dir {os.path.join(local_dir, f'global_step_{steps[-1]}', 'actor')}")
    raise MergerError(f"--local_dir {local_dir}: not an rlstudio FSDP checkpoint (no .metadata inside); {HINT}")


def load_checkpoint_weights(local_dir: str) -> dict[str, torch.Tensor]:
    """The role's full model weights, gathered from however many ranks wrote them (in this process, CPU)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = dcp.FileSystemReader(local_dir)
    entries = reader.read_metadata().state_dict_metadata
    model = {key[len("model."):]: torch.empty(meta.size, dtype=meta.properties.dtype)
             for key, meta in entries.items()
             if key.startswith("model.") and isinstance(meta, TensorStorageMetadata)}
    if not model:
        raise MergerError(f"--local_dir {local_dir}: the checkpoint holds no model weights; {HINT}")
    with warnings.catch_warnings():  # "no process group: loading in this process" is what we want
        warnings.simplefilter("ignore")
        state = {"model": model}
        dcp.load(state, storage_reader=reader)
    return state["model"]


def _config_source(local_dir: str) -> tuple[str, dict, bool]:
    """Where the config comes from: the checkpoint's huggingface/ folder, or (checkpoints written before it
    existed) the model path in the step's trainer_state.json, with the config overrides the run applied.
    Returns (folder, overrides, whether the causal LM's class becomes a value model as the critic loads it)."""
    files = os.path.join(local_dir, HF_FILES_DIR)
    if os.path.isfile(os.path.join(files, "config.json")):
        return files, {}, False
    state_file = os.path.join(os.path.dirname(local_dir), "trainer_state.json")
    role = os.path.basename(local_dir)
    if os.path.isfile(state_file) and role in ("actor", "critic"):
        with open(state_file) as f:
            cfg = json.load(f)["config"]
        model = cfg["critic"]["model"] if role == "critic" else cfg["actor_rollout_ref"]["model"]
        overrides = dict(model.get("override_config") or {})
        if role == "critic":
            overrides.update(num_labels=1, classifier_dropout=0.0)
        if os.path.isfile(os.path.join(os.path.expanduser(model["path"]), "config.json")):
            return os.path.expanduser(model["path"]), overrides, role == "critic"
    raise MergerError(f"--local_dir {local_dir}: no {HF_FILES_DIR}/config.json inside and no usable "
                      f"trainer_state.json beside it; {HINT}")


def _model_class(config, source: str, trust_remote_code: bool) -> type:
    import transformers

    arch = (config.architectures or [""])[0]
    cls = getattr(transformers, arch, None)
    if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):  # not a mixin a wrapper recorded
        return cls
    auto_map = getattr(config, "auto_map", None) or {}
    ref = next((v for v in auto_map.values() if isinstance(v, str) and v.endswith("." + arch)), None)
    if ref and trust_remote_code:
        from transformers.dynamic_module_utils import get_class_from_dynamic_module

        return get_class_from_dynamic_module(ref, source)
    if ref:
        raise MergerError(f"the model class {arch} is custom code; add --trust-remote-code to load it")
    raise MergerError(f"the checkpoint's config names the model class {arch!r}, which transformers does not have")


def _role_key(local_dir: str) -> str:
    return "critic.model.path" if os.path.basename(local_dir) == "critic" else "actor_rollout_ref.model.path"


def _lora_base(local_dir: str, base_model: str | None) -> str | None:
    """A LoRA checkpoint (lora/adapter_config.json, written at save time): the base model to merge into, checked
    before anything loads. None for a checkpoint of full weights."""
    from engine.adapters.lora import CHECKPOINT_DIR

    config_file = os.path.join(local_dir, CHECKPOINT_DIR, "adapter_config.json")
    if not os.path.isfile(config_file):
        if base_model:
            raise MergerError(f"--base_model {base_model}: --local_dir {local_dir} holds full weights, not a LoRA "
                              "adapter (no lora/adapter_config.json); drop --base_model")
        return None
    if base_model:
        path = os.path.expanduser(base_model)
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise MergerError(f"--base_model {base_model}: no model folder there (no config.json); pass the run's "
                              f"{_role_key(local_dir)}")
        return os.path.abspath(path)
    with open(config_file) as f:
        recorded = json.load(f).get("base_model_name_or_path")
    if recorded and os.path.isfile(os.path.join(recorded, "config.json")):
        return recorded
    if recorded and not os.path.isabs(recorded) and not recorded.startswith((".", "~")):
        return recorded  # a hub id: loaded (from the cache) with the base, which answers if it is not there
    raise MergerError(f"--local_dir {local_dir}: a LoRA checkpoint holds the adapter only, and its base model "
                      f"{recorded or '(not recorded)'} (lora/adapter_config.json) is not there; pass --base_model "
                      f"PATH: the run's {_role_key(local_dir)}")


def _lora_model(local_dir: str, base: str, model_cls: type, config, state: dict, trust_remote_code: bool):
    """The base model (fp32, as the trainer's masters) with the checkpoint's adapter loaded, as peft wraps it."""
    import torch
    from peft import LoraConfig, get_peft_model

    from engine.adapters.lora import CHECKPOINT_DIR

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = model_cls.from_pretrained(base, config=config, dtype=torch.float32,
                                              trust_remote_code=trust_remote_code)
    except OSError as exc:
        raise MergerError(f"the LoRA checkpoint's base model {base} did not load ({str(exc).splitlines()[0]}); pass "
                          f"--base_model PATH: the run's {_role_key(local_dir)}") from None
    lora_config = LoraConfig.from_pretrained(os.path.join(local_dir, CHECKPOINT_DIR))
    lora_config.inference_mode = False  # saved as peft saves it (True); here requires_grad marks the adapter
    with warnings.catch_warnings():  # "base_model_name_or_path was renamed": --base_model, as asked
        warnings.simplefilter("ignore")
        model = get_peft_model(model, lora_config)
    try:
        _, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a size mismatch: another model than the one the adapter trained on
        raise MergerError(f"the adapter in {local_dir} does not fit the base model {base} "
                          f"({str(exc).splitlines()[-1].strip()}); pass --base_model PATH: the run's "
                          f"{_role_key(local_dir)}") from None
    missing = [n for n, p in model.named_parameters() if p.requires_grad and n not in state]
    if unexpected or missing:
        raise MergerError(f"the adapter in {local_dir} does not fit the base model {base}: unexpected "
                          f"{sorted(unexpected)[:3]}, missing {missing[:3]}; pass --base_model PATH: the run's "
                          f"{_role_key(local_dir)}")
    return model


def _checkpoint_model(local_dir: str, base_model: str | None, trust_remote_code: bool):
    """(model class, config, full weights under the HF model's own names, the LoRA model or None, source of the
    config and tokenizer). A LoRA checkpoint's weights are its base's with the adapter merged (W + scale · B A,
    the trainer's own merge: engine.adapters.lora.merged_weights)."""
    source, overrides, value_head = _config_source(local_dir)
    base = _lora_base(local_dir, base_model)
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    for key, value in overrides.items():
        setattr(config, key, value)
    if value_head:  # the critic loads the causal LM's checkpoint with a one-label token-classification head
        config.architectures = [a.replace("ForCausalLM", "ForTokenClassification") for a in config.architectures]
    model_cls = _model_class(config, source, trust_remote_code)
    state = load_checkpoint_weights(local_dir)
    if base is None:
        if any(".lora_A." in key for key in state):
            raise MergerError(f"--local_dir {local_dir} holds a LoRA adapter but no lora/adapter_config.json (saved "
                              "before rlstudio recorded it); resume the run from this checkpoint "
                              "(trainer.resume_from_path) and merge the next checkpoint it saves")
        return model_cls, config, state, None, source
    import torch

    from engine.adapters.lora import merged_weights

    model = _lora_model(local_dir, base, model_cls, config, state, trust_remote_code)
    with torch.no_grad():
        merged = dict(merged_weights(model))
    return model_cls, config, merged, model, source


def merge(local_dir: str, target_dir: str, trust_remote_code: bool = False, base_model: str | None = None) -> str:
    """Write the checkpoint role at `local_dir` as an HF model directory `target_dir`; returns its path. A LoRA
    checkpoint (the adapter only) is merged into `base_model` (default: the base path it recorded), and its
    adapter is written too, in PEFT's layout, in `target_dir`/lora_adapter/."""
    local_dir = check_local_dir(local_dir)
    target = os.path.abspath(os.path.expanduser(target_dir))
    if os.path.exists(target) and not os.path.isdir(target):
        raise MergerError(f"--target_dir {target_dir} is a file; name a folder (it is created if missing)")
    model_cls, config, state, lora_model, source = _checkpoint_model(local_dir, base_model, trust_remote_code)
    from transformers import AutoTokenizer, GenerationConfig

    from engine.checkpoint.export import write_hf_model

    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):  # a config without tokenizer files beside it: weights and config only
        tokenizer = None
    generation = None
    if os.path.isfile(os.path.join(source, "generation_config.json")):
        generation = GenerationConfig.from_pretrained(source)
    write_hf_model(model_cls, config, state, target, tokenizer, generation)
    if lora_model is not None:
        from engine.adapters import lora

        lora.save_adapter(lora_model, lora.trainable_state(lora_model), os.path.join(target, lora.ADAPTER_DIR))
    return target


def compare(local_dir: str, test_hf_dir: str, trust_remote_code: bool = False, base_model: str | None = None) -> float:
    """The largest |difference| between the checkpoint's weights (a LoRA checkpoint's merged into its base) and
    those of the HF model at `test_hf_dir`."""
    from safetensors.torch import load_file

    local_dir = check_local_dir(local_dir)
    test_dir = os.path.expanduser(test_hf_dir)
    files = sorted(f for f in os.listdir(test_dir) if f.endswith(".safetensors")) if os.path.isdir(test_dir) else []
    if not files:
        raise MergerError(f"--test_hf_dir {test_hf_dir}: no *.safetensors files there; point it at a model saved "
                          "with save_pretrained")
    reference = {}
    for name in files:
        reference.update(load_file(os.path.join(test_dir, name)))
    if _lora_base(local_dir, base_model) is None:  # full weights: the checkpoint's own, no config needed
        state = load_checkpoint_weights(local_dir)
    else:
        state = _checkpoint_model(local_dir, base_model, trust_remote_code)[2]
    only_ckpt = sorted(set(state) - set(reference) - {"lm_head.weight"})  # a tied head is saved once
    only_ref = sorted(set(reference) - set(state))
    if only_ckpt or only_ref:
        raise MergerError(f"--test_hf_dir {test_hf_dir}: different weights: only in the checkpoint {only_ckpt[:5]}, "
                          f"only in the HF model {only_ref[:5]}")
    worst = 0.0
    for key, ref in reference.items():
        if ref.shape != state[key].shape:
            raise MergerError(f"--test_hf_dir {test_hf_dir}: {key} has shape {tuple(ref.shape)} there and "
                              f"{tuple(state[key].shape)} in the checkpoint")
        worst = max(worst, float((ref.float() - state[key].float()).abs().max()))
    return worst
