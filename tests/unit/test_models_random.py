import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2ForCausalLM

from engine.models.random import _init_weights, arch_config, build_random_model, main, num_parameters


def test_qwen25_05b_config_matches_the_real_model():
    c = arch_config("qwen2.5-0.5b")
    assert (c.model_type, c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads) == \
        ("qwen2", 896, 24, 14, 2)
    assert (c.intermediate_size, c.vocab_size, c.max_position_embeddings, c.head_dim) == (4864, 151936, 32768, 64)
    assert c.tie_word_embeddings is True
    assert c.rope_parameters["rope_theta"] == 1e6 and c.rms_norm_eps == 1e-6
    assert (c.bos_token_id, c.eos_token_id, c.pad_token_id) == (151643, 151645, 151643)
    assert num_parameters(c) == 494_032_768  # Qwen2.5-0.5B's published 0.49B


def test_qwen25_15b_config():
    c = arch_config("qwen2.5-1.5b")
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads) == (1536, 28, 12, 2)
    assert (c.intermediate_size, c.vocab_size, c.tie_word_embeddings) == (8960, 151936, True)
    assert num_parameters(c) == 1_543_714_304


def test_parameter_count_formula_matches_an_instantiated_model():
    for name in ("tiny-qwen2", "qwen2.5-0.5b"):
        config = arch_config(name)
        with torch.device("meta"):  # shapes only, nothing allocated
            model = Qwen2ForCausalLM(config)
        assert num_parameters(config) == sum(p.numel() for p in model.parameters()), name


def test_unknown_arch_is_rejected():
    with pytest.raises(ValueError, match="qwen2.5-0.5b"):
        arch_config("llama-7b")


@pytest.fixture(scope="module")
def tiny_random_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-qwen2")
    assert main(["--arch", "tiny-qwen2", "--out", str(out), "--seed", "3"]) == 0
    return out


def test_tiny_random_model_loads_and_generates(tiny_random_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_random_dir)
    tok = AutoTokenizer.from_pretrained(tiny_random_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.dtype == torch.bfloat16
    assert model.config.vocab_size == 151936 and len(tok) <= model.config.vocab_size
    assert tok.eos_token_id == model.config.eos_token_id == 151645
    assert model.generation_config.eos_token_id == 151645
    facts = json.loads((tiny_random_dir / "rlstudio_random.json").read_text())
    assert facts["num_parameters"] == sum(p.numel() for p in model.parameters())

    weights = model.model.layers[0].mlp.up_proj.weight.float()
    assert abs(weights.std().item() - 0.02) < 0.002 and abs(weights.mean().item()) < 0.002
    assert torch.all(model.model.norm.weight == 1) and torch.all(model.model.layers[0].self_attn.q_proj.bias == 0)

    batch = tok.apply_chat_template([{"role": "user", "content": "hello"}], add_generation_prompt=True,
                                    return_tensors="pt", return_dict=True)
    out = model.generate(**batch, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == batch["input_ids"].shape[1] + 4 or out[0, -1] == 151645
    assert torch.isfinite(model(**batch).logits).all()


def test_build_is_deterministic_by_seed(tiny_random_dir, tmp_path):
    reference = load_file(tiny_random_dir / "model.safetensors")
    build_random_model("tiny-qwen2", tmp_path, seed=3)
    rebuilt = load_file(tmp_path / "model.safetensors")
    assert rebuilt.keys() == reference.keys()
    assert all(torch.equal(rebuilt[k], reference[k]) for k in reference)


def test_init_depends_on_seed_and_dtype():
    def init(seed, dtype):
        layer = torch.nn.Linear(64, 64).to(dtype)
        _init_weights(layer, seed, std=0.02)
        return layer.weight.detach()

    assert torch.equal(init(0, torch.bfloat16), init(0, torch.bfloat16))
    assert not torch.equal(init(0, torch.bfloat16), init(1, torch.bfloat16))
    assert init(0, torch.float32).dtype == torch.float32


def test_eos_rate_calibration_is_finite_and_deterministic(tmp_path):
    facts = [build_random_model("tiny-qwen2", tmp_path / str(i), dtype="bfloat16", eos_rate=0.05) for i in range(2)]
    assert facts[0]["eos_channel_gain"] > 0 and facts[0]["eos_bias_mean"] == facts[0]["eos_bias_mean"]  # not NaN
    assert facts[0]["eos_channel_gain"] == facts[1]["eos_channel_gain"]
