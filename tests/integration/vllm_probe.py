"""One vLLM engine start, every in-engine check: run as `python tests/integration/vllm_probe.py MODEL DATA`.

It builds a real TrainWorker (one CPU worker, FSDP2 over gloo, rollout.name=vllm in fp32) in this process
and prints one JSON line of measurements that test_vllm_rollout.py asserts on:
  - log-prob parity: vLLM's log-probs of its sampled tokens vs the actor's recomputed ones;
  - weight sync: the weights inside the engine vs the actor's (gathered), before and after an update with a
    large learning rate, and how far the engine's weights moved;
  - greedy generations before/after the update, and vLLM's greedy vs the HF rollout's on the same weights.
It runs in its own process because vLLM patches process-wide state (torch.set_num_threads, environment).
"""
from __future__ import annotations

import json
import sys
import time

import torch


def weight_diff(engine: dict[str, torch.Tensor], actor: dict[str, torch.Tensor]) -> float:
    """Largest |engine − actor| over the engine's parameters (packed ones compared with their HF parts)."""
    from engine.rollout.vllm_rollout import hf_name_parts

    worst = 0.0
    for name, tensor in engine.items():
        parts = [actor[n] for n in hf_name_parts(name) if n in actor]
        if not parts:
            raise KeyError(f"no actor parameter for engine parameter {name}")
        ref = torch.cat(parts, dim=0) if len(parts) > 1 else parts[0]
        if tensor.shape != ref.shape and tensor.shape[1:] == ref.shape[1:]:
            tensor = tensor[: ref.shape[0]]  # vLLM pads the vocabulary dimension of the embedding
        worst = max(worst, (tensor.float() - ref.float()).abs().max().item())
    return worst


def main(model: str, data: str) -> dict:
    from transformers import AutoTokenizer

    from engine.config import build_config
    from engine.data.dataset import RLDataset, collate
    from engine.distributed.fsdp import full_state_dict
    from engine.rollout.hf_rollout import HFRollout
    from engine.workers.worker import TrainWorker, free_port

    cfg = build_config([
        f"data.train_files={data}/train.parquet", f"data.val_files={data}/test.parquet",
        "data.train_batch_size=16", "data.max_prompt_length=32", "data.max_response_length=8",
        f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "actor_rollout_ref.actor.optim.lr=0.05", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16", "actor_rollout_ref.actor.grad_clip=1e9",
        "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.n=1", "actor_rollout_ref.rollout.max_num_seqs=64",
        "algorithm.adv_estimator=reinforce_plus_plus", "trainer.n_gpus_per_node=1", "trainer.device=cpu",
    ])
    tokenizer = AutoTokenizer.from_pretrained(model)
    dataset = RLDataset(f"{data}/test.parquet", tokenizer, max_prompt_length=32)
    prompts = collate([dataset[i] for i in range(16)], tokenizer.pad_token_id)

    worker = TrainWorker(0, 1, cfg, total_steps=10, device="cpu", num_threads=torch.get_num_threads())
    worker.init("127.0.0.1", free_port(), uses_ref=False)
    hf_rollout = HFRollout(worker.actor_module, worker.tokenizer, cfg.actor_rollout_ref.rollout, "cpu")
    result: dict = {"rollout_type": type(worker.rollout).__name__}

    def actor_state():
        return {k: v.float() for k, v in full_state_dict(worker.actor_module).items()}

    def parity():
        batch, _ = worker.generate_sequences(prompts)
        out, _ = worker.compute_log_prob(batch)
        mask = batch["response_mask"].bool()
        diff = (batch["rollout_log_probs"] - out["old_log_probs"]).abs()[mask]
        return batch.union(out), {"mean": diff.mean().item(), "max": diff.max().item(), "tokens": int(mask.sum())}

    batch, result["parity_before"] = parity()
    engine_before = worker.rollout_engine_state_dict()
    result["weights_diff_before"] = weight_diff(engine_before, actor_state())
    greedy_before, _ = worker.generate_sequences(prompts, validate=True)

    # one on-policy update with a large learning rate and arbitrary advantages: the weights move a lot
    gen = torch.Generator().manual_seed(0)
    adv = torch.randn(len(batch), 1, generator=gen).expand_as(batch["response_mask"]) * batch["response_mask"]
    update = batch.select(["input_ids", "attention_mask", "position_ids", "responses", "response_mask"],
                          meta_keys=())
    update.tensors["advantages"] = adv.contiguous()
    worker.update_actor(update)
    start = time.perf_counter()
    worker.sync_rollout_weights()  # what the driver's sync_weights phase calls after each update
    result["sync_seconds"] = time.perf_counter() - start

    engine_after = worker.rollout_engine_state_dict()
    result["weights_diff_after"] = weight_diff(engine_after, actor_state())
    result["engine_weights_moved"] = max((engine_after[k] - engine_before[k]).abs().max().item()
                                         for k in engine_after)
    greedy_after, _ = worker.generate_sequences(prompts, validate=True)
    hf_greedy = hf_rollout.generate(prompts, validate=True)
    same = (greedy_before["responses"] == greedy_after["responses"]).all(dim=1)
    result["greedy_rows_changed"] = int((~same).sum())
    result["greedy_rows"] = len(prompts)
    agree = (greedy_after["responses"] == hf_greedy["responses"]).all(dim=1)
    result["greedy_vllm_equals_hf_rows"] = int(agree.sum())
    _, result["parity_after"] = parity()
    worker.shutdown()
    return result


if __name__ == "__main__":
    print("PROBE " + json.dumps(main(sys.argv[1], sys.argv[2])), flush=True)
