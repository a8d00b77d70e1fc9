"""Parameter-efficient adapters of a trained role (LoRA through peft): below the rollout and the roles, which both
read the adapted weights."""
