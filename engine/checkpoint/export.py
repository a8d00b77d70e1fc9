"""Writing weights as an ordinary Hugging Face model directory.

Two callers end here: the trainer's final export (`trainer.export_hf_model`, from the live FSDP2 weights) and
`python -m engine.model_merger` (from a saved checkpoint). Each checkpointed role also keeps the files a model
directory needs besides its weights (config, tokenizer, generation config) in `<role>/huggingface/`, as verl
does, so the merger needs nothing but the checkpoint folder.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where weights are written (the merger checks its arguments first)
    import torch
    from torch import nn

HF_FILES_DIR = "huggingface"  # inside global_step_N/<role>/ (verl's name)


def hf_class(module: nn.Module) -> type:
    """The transformers class of a model, also when FSDP2 has wrapped it (fully_shard swaps in a subclass) or peft
    has (a LoRA role: the class of the model inside, not peft's)."""
    if hasattr(module, "get_base_model") and hasattr(module, "peft_config"):
        module = module.get_base_model()
    return next(c for c in type(module).__mro__ if c.__module__.startswith("transformers."))


def save_hf_files(module: nn.Module, tokenizer, directory: str) -> None:
    """Config (with the model's own class as its architecture), tokenizer and generation config."""
    os.makedirs(directory, exist_ok=True)
    config = module.config
    config.architectures = [hf_class(module).__name__]
    config.save_pretrained(directory)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    if getattr(module, "generation_config", None) is not None:
        module.generation_config.save_pretrained(directory)


def write_hf_model(model_cls: type, config, state_dict: dict[str, torch.Tensor], directory: str,
                   tokenizer=None, generation_config=None) -> None:
    """`state_dict` (full tensors, keyed as the HF model's own) saved with save_pretrained into `directory`."""
    import torch

    with torch.device("meta"):
        model = model_cls(config)
    missing, unexpected = model.load_state_dict(state_dict, assign=True, strict=False)
    tied = getattr(config, "tie_word_embeddings", False)
    if tied:
        model.tie_weights()
        missing = [k for k in missing if getattr(model.get_parameter(k), "is_meta", False)]
    if missing or unexpected:
        raise ValueError(f"the weights do not fit {model_cls.__name__}: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    os.makedirs(directory, exist_ok=True)
    if generation_config is not None:
        model.generation_config = generation_config
    model.save_pretrained(directory)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    if generation_config is not None:
        generation_config.save_pretrained(directory)
