"""rlstudio engine: PPO/GRPO post-training with a single controller and FSDP2 workers."""
