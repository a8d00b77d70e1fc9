"""A LoRA actor in a real TrainWorker (one CPU worker, FSDP2 over gloo), run by test_lora.py in a subprocess of its
own (a process group per process). Prints one JSON line of facts: what trains, what the reference computes, what
the rollout samples from before and after an update, and what a checkpoint brings back.
    python tests/unit/lora_probe.py MODEL DATA OUT DECODE [key=value ...]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


def small_lora_run(model: str, data: str) -> list[str]:
    """The probes' run: 8 prompts of the arithmetic data, 6-token answers, a rank-8 adapter with a learning rate
    large enough that one update moves it, one CPU worker, blocking checkpoints."""
    return [f"data.train_files={data}/train.parquet", f"data.val_files={data}/test.parquet",
            "data.train_batch_size=8", "data.max_prompt_length=32", "data.max_response_length=6",
            f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.model.enable_gradient_checkpointing=False",
            "actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=16",
            "actor_rollout_ref.actor.optim.lr=0.05", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "actor_rollout_ref.actor.grad_clip=1e9",
            "actor_rollout_ref.rollout.n=1", "trainer.n_gpus_per_node=1", "trainer.device=cpu",
            "actor_rollout_ref.actor.checkpoint.async_save=False"]


def probe_prompts(model: str, data: str):
    """The first 8 test prompts, collated."""
    from transformers import AutoTokenizer

    from engine.data.dataset import RLDataset, collate

    tokenizer = AutoTokenizer.from_pretrained(model)
    return collate([RLDataset(f"{data}/test.parquet", tokenizer, max_prompt_length=32)[i] for i in range(8)],
                   tokenizer.pad_token_id)


def main(model: str, data: str, out: str, decode: str, extra: list[str]) -> dict:
    from engine.config import build_config
    from engine.workers.worker import TrainWorker, free_port

    cfg = build_config([*small_lora_run(model, data), "actor_rollout_ref.actor.use_kl_loss=True",
                        f"+actor_rollout_ref.rollout.engine_kwargs.hf.decode={decode}",
                        "algorithm.adv_estimator=reinforce_plus_plus", *extra])
    prompts = probe_prompts(model, data)

    def start() -> TrainWorker:
        worker = TrainWorker(0, 1, cfg, total_steps=10, device="cpu", num_threads=torch.get_num_threads())
        facts = worker.init("127.0.0.1", free_port(), uses_ref=True)
        return worker, facts

    worker, facts = start()
    result: dict = {"n_params": facts["n_params"], "n_trainable": facts["n_trainable_params"],
                    "critic_facts": [facts.get("critic_n_trainable_params"), facts.get("critic_n_params")],
                    "optimizer_params": sum(p.numel() for g in worker.actor.optimizer.param_groups
                                            for p in g["params"]),
                    "reference_is_actor_module": worker.reference.module is worker.actor_module}

    def log_probs(batch):
        actor, _ = worker.compute_log_prob(batch)
        ref, _ = worker.compute_ref_log_prob(batch)
        return actor["old_log_probs"], ref["ref_log_prob"]

    def rollout_gap(batch, actor_lp) -> float | None:
        """max |rollout − actor| log-prob; None for transformers' generate, which returns none (it samples with
        the actor's own module, adapter included)."""
        if "rollout_log_probs" not in batch.tensors:
            return None
        mask = batch["response_mask"].bool()
        return (batch["rollout_log_probs"] - actor_lp).abs()[mask].max().item()

    batch, _ = worker.generate_sequences(prompts)
    actor0, ref0 = log_probs(batch)
    mask = batch["response_mask"].bool()
    result["step1_actor_vs_ref"] = (actor0 - ref0).abs()[mask].max().item()
    result["step1_rollout_vs_actor"] = rollout_gap(batch, actor0)

    gen = torch.Generator().manual_seed(0)  # arbitrary advantages and a large learning rate: the adapter moves
    update = batch.select(["input_ids", "attention_mask", "position_ids", "responses", "response_mask"], meta_keys=())
    update.tensors["advantages"] = (torch.randn(len(batch), 1, generator=gen).expand_as(batch["response_mask"])
                                    * batch["response_mask"]).contiguous()
    update.tensors["old_log_probs"] = actor0
    update.tensors["ref_log_prob"] = ref0
    worker.update_actor(update)
    if worker.critic is not None:  # a LoRA critic: its adapter and value head train, its base does not
        values0 = worker.compute_values(batch)[0]["values"]
        critic_update = update.select(["input_ids", "attention_mask", "position_ids", "responses", "response_mask"],
                                      meta_keys=())
        critic_update.tensors["values"] = values0
        critic_update.tensors["returns"] = (values0 + 1.0) * batch["response_mask"]
        worker.update_critic(critic_update)
        values1 = worker.compute_values(batch)[0]["values"]
        result["critic_values_moved"] = (values1 - values0).abs()[mask].max().item()
        result["critic_trainable_share"] = (sum(p.numel() for p in worker.critic.module.parameters() if p.requires_grad)
                                            / sum(p.numel() for p in worker.critic.module.parameters()))
    actor1, ref1 = log_probs(batch)
    result["after_update_actor_moved"] = (actor1 - actor0).abs()[mask].max().item()
    result["after_update_ref_moved"] = (ref1 - ref0).abs()[mask].max().item()
    batch2, _ = worker.generate_sequences(prompts)
    actor2, _ = log_probs(batch2)
    result["after_update_rollout_vs_actor"] = rollout_gap(batch2, actor2)

    worker.save_checkpoint(f"{out}/ckpt")
    worker.finish_checkpoint()
    shards = sum(f.stat().st_size for f in Path(f"{out}/ckpt/actor").glob("*.distcp"))
    result["checkpoint_share_of_full_state"] = shards / (12 * facts["n_params"])  # fp32 weights + AdamW: 12 B each
    worker.shutdown()
    resumed, _ = start()
    resumed.load_checkpoint(f"{out}/ckpt")
    worker = resumed
    actor3, ref3 = log_probs(batch)
    result["resumed_actor_vs_saved"] = (actor3 - actor1).abs()[mask].max().item()
    result["resumed_ref_vs_saved"] = (ref3 - ref1).abs()[mask].max().item()
    resumed.shutdown()
    return result


if __name__ == "__main__":
    print("PROBE " + json.dumps(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])), flush=True)
