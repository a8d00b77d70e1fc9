"""LoRA adapters on a trained role (verl's `*.model.lora_rank`, `lora_alpha`, `target_modules`, `exclude_modules`,
`lora_adapter_path`), through `peft`.

The role's HF model is wrapped before FSDP shards it; only the adapter's parameters require gradients, so the
optimizer holds state for them alone. The reference is the same module with the adapter switched off (no second
copy of the weights). A rollout samples from base + adapter: `merged_weights` gives the weights under the plain
HF model's names with each adapted linear layer merged (W + scale · B A), which is what the static decoder binds
and what vLLM loads; the training module itself is never merged in place, so the update always sees base and
adapter apart.

On disk (docs/checkpoints.md): an export writes the merged model and, in `lora_adapter/`, the adapter in PEFT's
layout (`save_adapter`); a checkpoint keeps the adapter's weights in DCP and its config in `lora/`
(`save_adapter_config`, with the base model's path), which is what the model merger needs besides the base.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch
from torch import nn

PREFIX = "base_model.model."  # what peft puts before the wrapped HF model's own parameter names


def enabled(model_cfg) -> bool:
    return int(getattr(model_cfg, "lora_rank", 0) or 0) > 0


def wrap(model: nn.Module, model_cfg, value_head: bool = False) -> nn.Module:
    """`model` with a trainable LoRA adapter (a new one, or `lora_adapter_path`'s); every other weight frozen.
    `value_head`: the critic's new score layer trains in full (it starts random; an adapter on it would learn
    nothing useful)."""
    from peft import LoraConfig, PeftModel, get_peft_model

    path = getattr(model_cfg, "lora_adapter_path", None)
    if path:
        return PeftModel.from_pretrained(model, path, is_trainable=True)
    targets = model_cfg.target_modules
    config = LoraConfig(r=int(model_cfg.lora_rank), lora_alpha=int(model_cfg.lora_alpha), lora_dropout=0.0,
                        target_modules=targets if isinstance(targets, str) else list(targets),
                        exclude_modules=getattr(model_cfg, "exclude_modules", None) or None, bias="none",
                        modules_to_save=["score"] if value_head else None)
    return get_peft_model(model, config)


def is_lora(module: nn.Module) -> bool:
    return hasattr(module, "disable_adapter") and hasattr(module, "peft_config")


def base_model(module: nn.Module) -> nn.Module:
    """The HF model inside a peft wrapper (its config, generation config, class); the module itself otherwise."""
    return module.get_base_model() if is_lora(module) else module


@contextlib.contextmanager
def adapter_off(module: nn.Module):
    """The base model's forward (the reference of a LoRA run); a plain module is used as it is."""
    if not is_lora(module):
        yield
        return
    with module.disable_adapter():
        yield


def parameter_counts(module: nn.Module) -> dict[str, int]:
    """Trainable and total parameters (local shards' global sizes: FSDP2 parameters are DTensors)."""
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    return {"trainable": trainable, "total": sum(p.numel() for p in module.parameters())}


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def plain_name(name: str) -> str:
    """A peft-wrapped parameter's or buffer's name as the plain HF model has it."""
    name = name.removeprefix(PREFIX)
    return name.replace(".base_layer.", ".")


def merged_weights(module: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) under the plain HF model's names, adapters merged; a plain module's own parameters as they
    are. Sharded tensors are gathered one at a time (collective: every rank iterates in the same order)."""
    if not is_lora(module):
        for name, p in module.named_parameters(remove_duplicate=False):
            yield name, _full(p)
        return
    from peft.tuners.lora import LoraLayer

    adapted = {}
    for name, sub in module.named_modules():
        if isinstance(sub, LoraLayer) and sub.active_adapters:
            adapted[name + ".base_layer.weight"] = sub
    for name, p in module.named_parameters(remove_duplicate=False):  # tied weights under both names
        if ".lora_A." in name or ".lora_B." in name or ".original_module." in name:
            continue
        weight = _full(p)
        layer = adapted.get(name)
        if layer is not None:
            weight = weight + _delta(layer).to(weight.dtype)
        yield plain_name(name.replace(".modules_to_save.default.", ".")), weight


def _delta(layer) -> torch.Tensor:
    """scale · B A of a linear LoRA layer's active adapter(s), full size."""
    delta = None
    for adapter in layer.active_adapters:
        if adapter not in layer.lora_A:
            continue
        a = _full(layer.lora_A[adapter].weight)
        b = _full(layer.lora_B[adapter].weight)
        d = (b.float() @ a.float()) * layer.scaling[adapter]
        delta = d if delta is None else delta + d
    return delta


# ---- the adapter on disk (exports and checkpoints) ------------------------------------------------------------
ADAPTER_DIR = "lora_adapter"  # an export's adapter in PEFT's layout, inside the merged model's folder
CHECKPOINT_DIR = "lora"  # a checkpoint role's adapter config (adapter_config.json; the weights are DCP's)
ADAPTER_NAME = "default"  # the one adapter wrap() makes (peft's default name)


def base_path(module: nn.Module) -> str | None:
    """The path (or hub id) the base weights were loaded from: absolute when it is a local folder, so a merge
    from another working directory still finds it."""
    path = base_model(module).name_or_path or None
    return os.path.abspath(path) if path and os.path.isdir(path) else path


def trainable_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """Full CPU copies of the parameters that train (the adapter, a LoRA critic's value head), under the wrapped
    module's names. Collective on a sharded module: every rank calls it; every rank gets the tensors."""
    return {name: _full(p).detach().cpu().clone() for name, p in module.named_parameters() if p.requires_grad}


def save_adapter_config(module: nn.Module, directory: str) -> None:
    """adapter_config.json as peft writes it, with the base model's path (not that of a `lora_adapter_path` the
    run started from) and inference_mode on."""
    import copy

    config = copy.deepcopy(module.peft_config[ADAPTER_NAME])
    config.base_model_name_or_path = base_path(module)
    config.inference_mode = True
    cls = type(base_model(module))
    cls = next((c for c in cls.__mro__ if c.__module__.startswith("transformers.")), cls)  # not FSDP's subclass
    os.makedirs(directory, exist_ok=True)
    config.save_pretrained(directory, auto_mapping_dict={"base_model_class": cls.__name__,
                                                         "parent_library": cls.__module__})


def save_adapter(module: nn.Module, trainable: dict[str, torch.Tensor], directory: str) -> None:
    """`directory` in PEFT's layout (adapter_config.json + adapter_model.safetensors; `PeftModel.from_pretrained(
    base, directory)` loads it). `trainable`: `trainable_state(module)`; peft's own function renames it to the
    saved keys (adapter name dropped, a modules_to_save copy under its layer's name)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    state = get_peft_model_state_dict(module, state_dict=trainable, adapter_name=ADAPTER_NAME)
    if not state:
        raise ValueError(f"no adapter weights among {sorted(trainable)[:5]}: nothing to save in {directory}")
    save_adapter_config(module, directory)
    save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(directory, "adapter_model.safetensors"),
              metadata={"format": "pt"})
