"""A saved checkpoint as a Hugging Face model: `python -m engine.model_merger merge --backend fsdp
--local_dir <trainer.default_local_dir>/global_step_N/actor --target_dir D` (verl's command line).

`merge` gathers the role's sharded weights (torch.distributed.checkpoint, any number of ranks) in this one
process on the CPU and writes D with save_pretrained, next to the config and tokenizer the checkpoint keeps in
`huggingface/`. A LoRA checkpoint holds the adapter only: it is merged into its base model (the path recorded
in `lora/adapter_config.json` at save time, or `--base_model`), and D gets the adapter in PEFT's layout too, in
`D/lora_adapter/`. `test --test_hf_dir D` compares a checkpoint's weights with an HF model directory.
"""
from engine.model_merger.to_hf import MergerError, load_checkpoint_weights, merge

__all__ = ["MergerError", "load_checkpoint_weights", "merge"]
