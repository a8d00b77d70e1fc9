"""Random-init models of real architectures, for benchmarks that need the real shapes but no downloads.

    python -m engine.models.random --arch qwen2.5-0.5b --out DIR [--dtype bfloat16] [--seed 0] [--eos-rate P]

The directory is an ordinary Qwen2 checkpoint (config.json, model.safetensors, generation_config.json) with
a byte-level tokenizer whose special tokens sit at Qwen's ids, so prompts, chat template, EOS and padding
behave like the real model's, and any text encodes and decodes. The weights are noise: useful for speed and
memory, not for quality.

A random-init model almost never says its end token (one in 151,936 per step), so every answer runs to the
length cap. `--eos-rate P` builds one that ends an answer with probability about P per generated token (answers
about 1/P tokens long on average, geometrically spread, so a few reach any cap): channel 0 of the residual
stream is made a constant (every token embedding holds the same value there, and no layer reads or writes that
channel), and the final norm's weight on it and the end token's (tied) embedding turn that constant into a
logit bias for the end token alone. The bias is calibrated where answers are generated: over the answer
positions of chat prompts (ASCII questions of GSM8K-like lengths) followed by random tokens, which is what a
random model's sampled answers are. Every other token's probability is unchanged relative to the rest, and
the model has the same shapes and speed.

The constant is 1.0, not the embeddings' scale (0.02): training moves every weight, including the zeros that
keep the layers off channel 0, by about the learning rate per step (AdamW), and ~5,000-wide layers then write
~1e-2 into that channel in one step. On 0.02 that is a large part of the bias (one step at lr 1e-6 made W2's
end-token rate 3-20x higher, and the reference, which is not trained, disagreed with the actor); on 1.0 it is ~1%.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib
from pathlib import Path

import torch
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

from engine.models.tokenizer import ENDOFTEXT, IM_END, QWEN_SPECIAL_IDS, build_byte_tokenizer

FACTS_FILE = "rlstudio_random.json"

_QWEN25_COMMON = {
    "vocab_size": 151936, "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True, "hidden_act": "silu", "use_sliding_window": False,
    "bos_token_id": QWEN_SPECIAL_IDS[ENDOFTEXT], "eos_token_id": QWEN_SPECIAL_IDS[IM_END],
    "pad_token_id": QWEN_SPECIAL_IDS[ENDOFTEXT],
}
ARCHS: dict[str, dict] = {
    "qwen2.5-0.5b": dict(_QWEN25_COMMON, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, intermediate_size=4864),
    "qwen2.5-1.5b": dict(_QWEN25_COMMON, hidden_size=1536, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, intermediate_size=8960),
    # Qwen's vocabulary and token ids with a toy body (head_dim 32, GQA 2:1): for tests.
    "tiny-qwen2": dict(_QWEN25_COMMON, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=1, intermediate_size=128),
}
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def arch_config(name: str) -> Qwen2Config:
    if name not in ARCHS:
        raise ValueError(f"unknown arch {name!r}; known: {', '.join(ARCHS)}")
    fields = ARCHS[name]
    config = Qwen2Config(**fields, head_dim=fields["hidden_size"] // fields["num_attention_heads"])
    config.rope_theta = fields["rope_theta"]  # also written top-level, for readers using transformers 4.x
    return config


def num_parameters(config: Qwen2Config) -> int:
    """Parameter count of Qwen2ForCausalLM for `config`, computed from the shapes (nothing is allocated)."""
    hidden, inter, head_dim = config.hidden_size, config.intermediate_size, config.head_dim
    q_out, kv_out = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim
    attention = hidden * q_out + q_out + 2 * (hidden * kv_out + kv_out) + q_out * hidden  # q,k,v have biases
    layer = attention + 3 * hidden * inter + 2 * hidden  # gate/up/down + two RMSNorms
    embeddings = config.vocab_size * hidden * (1 if config.tie_word_embeddings else 2)
    return config.num_hidden_layers * layer + embeddings + hidden  # + final norm


@torch.no_grad()
def _init_weights(model: torch.nn.Module, seed: int, std: float) -> None:
    """Deterministic init: each tensor gets its own generator seeded by (seed, name), so the result depends
    on neither parameter order nor thread count."""
    for name, param in model.named_parameters():  # tied weights are listed once
        if name.endswith("norm.weight"):
            param.fill_(1.0)
        elif name.endswith(".bias"):
            param.zero_()
        else:
            # torch's CPU generator keeps only 32 bits of a seed: hash seed and name together into 32
            generator = torch.Generator().manual_seed(zlib.crc32(f"{seed}/{name}".encode()))
            param.normal_(0.0, std, generator=generator)


EOS_CHANNEL = 1.0  # the constant in channel 0 (module doc: why not the embeddings' own scale)
CALIBRATION_ANSWER = 192  # answer positions the end-token rate is calibrated over


def calibration_ids(tokenizer, seed: int, rows: int = 8) -> list[tuple[torch.Tensor, int]]:
    """Sequences like W2's: a chat prompt (an ASCII question of 150-600 characters, GSM8K's range) followed by
    CALIBRATION_ANSWER random non-special tokens (what a random model samples); each as ([1, L] ids, index of the
    first answer token)."""
    generator = torch.Generator().manual_seed(zlib.crc32(f"{seed}/eos-calibration".encode()))
    special = min(QWEN_SPECIAL_IDS.values())
    out = []
    for _ in range(rows):
        n = int(torch.randint(150, 600, (1,), generator=generator))
        chars = torch.randint(0, 31, (n,), generator=generator).tolist()
        words = "".join(chr(ord("a") + c) if c < 26 else " " for c in chars)
        text = tokenizer.apply_chat_template([{"role": "user", "content": words}], tokenize=False,
                                             add_generation_prompt=True)
        prompt = torch.tensor(tokenizer(text)["input_ids"])
        answer = torch.randint(0, special, (CALIBRATION_ANSWER,), generator=generator)
        out.append((torch.cat([prompt, answer])[None], prompt.numel()))
    return out


@torch.no_grad()
def _set_eos_rate(model: Qwen2ForCausalLM, rate: float, seed: int, tokenizer) -> dict:
    """Makes the end token's probability about `rate` per answer position (see the module doc); returns the facts.

    Channel 0 holds a constant `a` in every token embedding (2a in the end token's), no layer reads it (its
    input-norm weights are 0) or writes it (rows 0 of o_proj and down_proj are 0), so the final hidden state's
    channel 0 is g·a/rms(x) at every position. With tied embeddings each token's logit gets a·g·a/rms (the
    same for all: no effect on the softmax) and the end token's gets twice that: a bias of g·a²/rms, set by
    choosing g so that the mean end-token probability over the answer positions of `calibration_ids` equals
    `rate`."""
    config = model.config
    eos = config.eos_token_id
    embed = model.get_input_embeddings().weight
    a = EOS_CHANNEL
    embed[:, 0] = a
    embed[eos, 0] = 2 * a
    for layer in model.model.layers:
        layer.input_layernorm.weight[0] = 0.0
        layer.post_attention_layernorm.weight[0] = 0.0
        layer.self_attn.o_proj.weight[0, :] = 0.0
        layer.mlp.down_proj.weight[0, :] = 0.0
    model.model.norm.weight[0] = 0.0  # calibration reads the rest of the logits without the bias channel
    # to_empty() left the rotary buffers uninitialised (they are rebuilt on load, never saved): rebuild them
    model.model.rotary_emb = type(model.model.rotary_emb)(config=config)
    pres, posts = [], []
    for ids, start in calibration_ids(tokenizer, seed):
        captured = {}
        handle = model.model.norm.register_forward_hook(lambda mod, inp, out: captured.update(pre=inp[0], post=out))
        try:
            model.model(input_ids=ids)
        finally:
            handle.remove()
        # the positions whose next token is an answer token: the last prompt position and the answer's own
        pres.append(captured["pre"][0, start - 1:-1].float())
        posts.append(captured["post"][0, start - 1:-1].float())
    pre, hidden = torch.cat(pres), torch.cat(posts)
    inv_rms = torch.rsqrt(pre.pow(2).mean(-1) + model.model.norm.variance_epsilon)
    logits = hidden.float() @ embed.float().T  # [positions, vocab], channel 0 contributes nothing (g = 0)
    others = torch.logsumexp(torch.cat([logits[:, :eos], logits[:, eos + 1:]], 1), dim=-1)
    eos_logit = logits[:, eos]

    def mean_p(g: float) -> float:
        return float(torch.sigmoid(eos_logit + g * a * a * inv_rms - others).mean())

    lo, hi = 0.0, 1.0
    while mean_p(hi) < rate:
        hi *= 2.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_p(mid) < rate else (lo, mid)
    g = (lo + hi) / 2
    model.model.norm.weight[0] = g
    bias = g * a * a * inv_rms
    return {"eos_rate": rate, "eos_bias_mean": round(float(bias.mean()), 3),
            "eos_bias_std": round(float(bias.std()), 3), "eos_channel_gain": round(g, 4), "eos_channel": a}


def build_random_model(arch: str, out_dir: str | os.PathLike, dtype: str = "bfloat16", seed: int = 0,
                       eos_rate: float = 0.0) -> dict:
    """Writes a random-init `arch` model + tokenizer to out_dir and returns its facts. `eos_rate` > 0: the
    end token has about that probability per generated token (module doc)."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    if not 0.0 <= eos_rate < 1.0:
        raise ValueError(f"eos_rate={eos_rate}: use a probability in [0, 1), e.g. 0.005 for ~200-token answers")
    started = time.time()
    config = arch_config(arch)
    # Shapes only on the meta device (no default init of hundreds of millions of weights), then memory is
    # allocated once in the target dtype and filled by our own init.
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    model = model.to(DTYPES[dtype]).to_empty(device="cpu")
    model.tie_weights()
    _init_weights(model, seed, config.initializer_range)
    tokenizer = build_byte_tokenizer(model_max_length=config.max_position_embeddings)
    eos_facts = {}
    if eos_rate > 0:
        # calibrated in fp32 (a bf16 forward on CPU is slow and no more faithful), then cast back
        model = model.float()
        eos_facts = _set_eos_rate(model, eos_rate, seed, tokenizer)
        model = model.to(DTYPES[dtype])
    model.config.dtype = DTYPES[dtype]

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)  # only parameters are saved; rotary buffers are rebuilt on load
    tokenizer.save_pretrained(out_dir)
    GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                     pad_token_id=config.pad_token_id).save_pretrained(out_dir)
    facts = {"arch": arch, "dtype": dtype, "seed": seed, "num_parameters": num_parameters(config),
             **eos_facts, "build_seconds": round(time.time() - started, 1)}
    (out_dir / FACTS_FILE).write_text(json.dumps(facts, indent=1) + "\n")
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.models.random", description=__doc__.split("\n")[0])
    parser.add_argument("--arch", required=True, choices=sorted(ARCHS))
    parser.add_argument("--out", required=True, help="directory to write the model to")
    parser.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eos-rate", type=float, default=0.0,
                        help="probability of the end token per generated token (0: the random model's own, ~0)")
    args = parser.parse_args(argv)
    try:
        facts = build_random_model(args.arch, args.out, args.dtype, args.seed, args.eos_rate)
    except ValueError as exc:
        parser.error(str(exc))
    print(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
