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


def _end_rate(model, tok, questions, answer_len=64, seed=5):
    """Mean end-token probability over the answer positions of chat prompts followed by random tokens."""
    g = torch.Generator().manual_seed(seed)
    probs = []
    for q in questions:
        text = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        prompt = torch.tensor(tok(text)["input_ids"])
        ids = torch.cat([prompt, torch.randint(0, 151643, (answer_len,), generator=g)])[None]
        logits = model(input_ids=ids).logits[0, prompt.numel() - 1:-1].float()
        probs.append(torch.softmax(logits, -1)[:, model.config.eos_token_id])
    return float(torch.cat(probs).mean())


def test_eos_rate_holds_after_chat_prompts_and_an_optimizer_step(tmp_path):
    """The rate is what answers after a chat prompt see, and training does not move it: on W2 one AdamW step at
    lr 1e-6 used to make the end token 3-20x likelier (the constant channel was 0.02 and every layer writes ~lr x
    its width into it per step), so answers collapsed and the untrained reference disagreed with the actor. The
    tiny model is ~80x narrower than Qwen2.5-0.5B, so the step here uses a 1,000x larger learning rate (the old
    construction's rate halved in it)."""
    rate = 0.02
    build_random_model("tiny-qwen2", tmp_path, dtype="float32", eos_rate=rate)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    questions = ["Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                 "How many clips did Natalia sell altogether in April and May?",
                 "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
                 "How much did she earn? Let's think step by step and output the final answer after \"####\"."]
    with torch.no_grad():
        before = _end_rate(model, tok, questions)
    assert rate / 1.3 < before < rate * 1.3, before

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 151643, (4, 48), generator=g)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    logp = torch.log_softmax(model(input_ids=ids).logits[:, :-1].float(), -1)
    token_lp = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None]
    (-(advantages * token_lp).mean() + logp[..., model.config.eos_token_id].exp().mean()).backward()
    optimizer.step()
    with torch.no_grad():
        after = _end_rate(model, tok, questions)
    assert abs(after / before - 1) < 0.1, (before, after)
