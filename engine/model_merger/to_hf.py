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
    if isinstance(cls, type):
        return cls
    auto_map = getattr(config, "auto_map", None) or {}
    ref = next((v for v in auto_map.values() if isinstance(v, str) and v.endswith("." + arch)), None)
    if ref and trust_remote_code:
        from transformers.dynamic_module_utils import get_class_from_dynamic_module

        return get_class_from_dynamic_module(ref, source)
    if ref:
        raise MergerError(f"the model class {arch} is custom code; add --trust-remote-code to load it")
    raise MergerError(f"the checkpoint's config names the model class {arch!r}, which transformers does not have")


def merge(local_dir: str, target_dir: str, trust_remote_code: bool = False) -> str:
    """Write the checkpoint role at `local_dir` as an HF model directory `target_dir`; returns its path."""
    local_dir = check_local_dir(local_dir)
    target = os.path.abspath(os.path.expanduser(target_dir))
    if os.path.exists(target) and not os.path.isdir(target):
        raise MergerError(f"--target_dir {target_dir} is a file; name a folder (it is created if missing)")
    source, overrides, value_head = _config_source(local_dir)
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    from engine.checkpoint.export import write_hf_model

    config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    for key, value in overrides.items():
        setattr(config, key, value)
    if value_head:  # the critic loads the causal LM's checkpoint with a one-label token-classification head
        config.architectures = [a.replace("ForCausalLM", "ForTokenClassification") for a in config.architectures]
    model_cls = _model_class(config, source, trust_remote_code)
    state = load_checkpoint_weights(local_dir)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):  # a config without tokenizer files beside it: weights and config only
        tokenizer = None
    generation = None
    if os.path.isfile(os.path.join(source, "generation_config.json")):
        generation = GenerationConfig.from_pretrained(source)
    write_hf_model(model_cls, config, state, target, tokenizer, generation)
    return target


def compare(local_dir: str, test_hf_dir: str) -> float:
    """The largest |difference| between the checkpoint's weights and those of the HF model at `test_hf_dir`."""
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
    state = load_checkpoint_weights(local_dir)
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
