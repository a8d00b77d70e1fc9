"""Stale rollouts planted in a real worker (one CPU worker, FSDP2 over gloo, fp32), run by test_rollout_freshness.py
as `python tests/integration/freshness_probe.py MODEL DATA vllm|static [cpu|cuda]` (cuda: the static mode on a GPU, bf16
compute, by hand).

vllm: a real vLLM engine, one engine start.
Full fine-tuning, then a LoRA actor on the same engine; after each update the worker syncs and checks
(engine/rollout/freshness.py) and the probe records the update's rollout/* metrics:
  full:  normal sync, sync skipped (the rollout's sync_weights replaced by a no-op here), normal again;
  lora:  the sync streaming the base weights without the adapter from the LoRA actor's first sync on (verl #7495: the
         adapter never reaches vLLM, the rollout keeps sampling from the base), two updates; then the real sync, two.
static: a LoRA actor with the static decoder (the rollout binds the actor's merged weights at each generation; its
check runs there): normal generations, then the decoder binding the base weights without the adapter (the adapter
never reaches it) twice, then normal again.
The planted failures are made in this script only. Prints one JSON line.
"""
from __future__ import annotations

import json
import sys

import torch


def main(model: str, data: str, mode: str, device: str = "cpu") -> dict:
    from transformers import AutoTokenizer

    from engine.adapters import lora
    from engine.config import build_config
    from engine.config.frozen import editable_copy
    from engine.data.dataset import RLDataset, collate
    from engine.rollout import freshness, vllm_rollout
    from engine.workers.worker import TrainWorker, free_port

    rollout = ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.dtype=float32",
               "actor_rollout_ref.rollout.max_num_seqs=16"] if mode == "vllm" else [
        "+actor_rollout_ref.rollout.engine_kwargs.hf.decode=static", "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16"]
    cfg = build_config([
        f"data.train_files={data}/train.parquet", f"data.val_files={data}/test.parquet",
        "data.train_batch_size=8", "data.max_prompt_length=32", "data.max_response_length=6",
        f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "actor_rollout_ref.actor.optim.lr=0.01", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "actor_rollout_ref.actor.grad_clip=1e9",
        "actor_rollout_ref.rollout.n=1", *rollout,
        "algorithm.adv_estimator=reinforce_plus_plus", "trainer.n_gpus_per_node=1", f"trainer.device={device}",
        *(["+actor_rollout_ref.rollout.engine_kwargs.hf.compile_step=false"] if device == "cuda" else []),
    ])
    tokenizer = AutoTokenizer.from_pretrained(model)
    dataset = RLDataset(f"{data}/test.parquet", tokenizer, max_prompt_length=32)
    prompts = collate([dataset[i] for i in range(8)], tokenizer.pad_token_id)
    worker = TrainWorker(0, 1, cfg, total_steps=20, device=device, num_threads=torch.get_num_threads())
    worker.init("127.0.0.1", free_port(), uses_ref=False)
    gen = torch.Generator().manual_seed(0)

    def step() -> dict:
        """Generate, one update with arbitrary advantages (the weights move); the rollout/* metrics of the sync after
        the update (vllm) or of the generation (static: the check runs where the decoder binds the weights)."""
        batch, gen_metrics = worker.generate_sequences(prompts)
        update = batch.select(["input_ids", "attention_mask", "position_ids", "responses", "response_mask"],
                              meta_keys=())
        adv = torch.randn(len(batch), 1, generator=gen).expand_as(batch["response_mask"]) * batch["response_mask"]
        update.tensors["advantages"] = adv.contiguous()
        _, metrics = worker.update_actor(update)
        metrics |= worker.sync_rollout_weights()  # the driver's sync_weights phase
        if mode == "static":
            return {k: v for k, v in gen_metrics.items() if k.startswith("rollout/")}
        return {k: v[0] for k, v in metrics.items() if k.startswith("rollout/") or k == "timing_s/weight_check"}

    if mode == "static":
        return static(worker, step)

    result: dict = {"full": [], "lora": []}
    engine = worker.rollout  # the VLLMRollout itself (no agent loop here)
    result["full"].append(step())
    engine.sync_weights = lambda: 0  # planted: the sync is skipped
    result["full"].append(step())
    del engine.sync_weights  # the class's sync again
    result["full"].append(step())

    # the same engine, now fed by a LoRA actor (the worker builds it as for actor_rollout_ref.model.lora_rank > 0)
    real = vllm_rollout.streamed_weights

    def base_only(module, dtype=None):
        """planted (verl #7495): the base model's weights under the plain names, the adapter left out."""
        for name, p in module.named_parameters():
            if ".lora_A." not in name and ".lora_B." not in name:
                t = p.full_tensor() if hasattr(p, "full_tensor") else p
                yield lora.plain_name(name), t.detach().to(dtype)

    vllm_rollout.streamed_weights = base_only  # from the LoRA actor's first sync on: the adapter never arrives
    # the config is read-only once resolved: the planted LoRA goes on an editable copy the worker's builder reads
    planted = editable_copy(worker.builder.cfg)
    model_cfg = planted.actor_rollout_ref.model
    model_cfg.lora_rank, model_cfg.lora_alpha, model_cfg.target_modules = 8, 16, "all-linear"
    worker.builder.cfg = planted
    worker.actor = worker.builder.actor()
    worker.actor_module = worker.actor.module
    engine.module = worker.actor_module
    worker.freshness = freshness.for_rollout(worker.actor_module, engine)
    worker._sync_rollout_weights()
    result["lora_trainable"] = lora.parameter_counts(worker.actor_module)["trainable"]
    result["lora"].append(step())
    result["lora"].append(step())
    vllm_rollout.streamed_weights = real  # the merged weights again
    result["lora"].append(step())
    result["lora"].append(step())
    worker.shutdown()
    return result


def static(worker, step) -> dict:
    from types import SimpleNamespace

    from engine.adapters import lora
    from engine.rollout import static_decoder

    result: dict = {"rollout": type(worker.rollout.static).__name__, "steps": []}
    result["steps"] += [step(), step()]

    def base_only(module):
        """planted: the decoder binds the base weights, the adapter left out (the actor is unsharded here)."""
        return ((lora.plain_name(n), p) for n, p in module.named_parameters(remove_duplicate=False)
                if ".lora_A." not in n and ".lora_B." not in n)

    static_decoder.lora = SimpleNamespace(is_lora=lora.is_lora, plain_name=lora.plain_name, merged_weights=base_only)
    result["steps"] += [step(), step()]
    static_decoder.lora = lora
    result["steps"] += [step()]
    worker.shutdown()
    return result


if __name__ == "__main__":
    print("PROBE " + json.dumps(main(*sys.argv[1:5])), flush=True)
