"""A LoRA actor and a LoRA critic in a real TrainWorker (one CPU worker, FSDP2 over gloo), run by
test_lora_export.py in a subprocess of its own. One update moves both adapters; then the worker saves a checkpoint
and exports the actor (`export_hf`, what `trainer.export_hf_model` calls), and the probe writes what the trained
roles compute on a fixed batch (the actor's log-probs, the critic's values) for the test to compare with.
    python tests/integration/lora_export_probe.py MODEL DATA OUT
"""
from __future__ import annotations

import sys

import torch


def main(model: str, data: str, out: str) -> None:
    from lora_probe import probe_prompts, small_lora_run  # beside this script

    from engine.config import build_config
    from engine.workers.worker import TrainWorker, free_port

    cfg = build_config([*small_lora_run(model, data), "algorithm.adv_estimator=gae", "critic.model.lora_rank=8",
                        "critic.ppo_micro_batch_size_per_gpu=8", "critic.optim.lr=0.05",
                        "critic.checkpoint.async_save=False"])
    prompts = probe_prompts(model, data)
    worker = TrainWorker(0, 1, cfg, total_steps=10, device="cpu", num_threads=torch.get_num_threads())
    worker.init("127.0.0.1", free_port(), uses_ref=False)
    batch, _ = worker.generate_sequences(prompts)
    keys = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask"]
    update = batch.select(keys, meta_keys=())
    update.tensors["old_log_probs"] = worker.compute_log_prob(batch)[0]["old_log_probs"]
    gen = torch.Generator().manual_seed(0)  # arbitrary advantages and a large learning rate: both adapters move
    update.tensors["advantages"] = (torch.randn(len(batch), 1, generator=gen).expand_as(batch["response_mask"])
                                    * batch["response_mask"]).contiguous()
    worker.update_actor(update)
    values0 = worker.compute_values(batch)[0]["values"]
    critic_update = batch.select(keys, meta_keys=())
    critic_update.tensors["values"] = values0
    critic_update.tensors["returns"] = (values0 + 1.0) * batch["response_mask"]
    worker.update_critic(critic_update)

    worker.save_checkpoint(f"{out}/ckpt/global_step_1")
    worker.finish_checkpoint()
    worker.export_hf(f"{out}/hf_model")
    torch.save({**{k: batch[k] for k in keys}, "log_probs": worker.compute_log_prob(batch)[0]["old_log_probs"],
                "values": worker.compute_values(batch)[0]["values"]}, f"{out}/trained.pt")
    worker.shutdown()
    print("PROBE done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
