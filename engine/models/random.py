"""Random-init models of real architectures, for benchmarks that need the real shapes but no downloads.

    python -m engine.models.random --arch qwen2.5-0.5b --out DIR [--dtype bfloat16] [--seed 0]

The directory is an ordinary Qwen2 checkpoint (config.json, model.safetensors, generation_config.json) with
a byte-level tokenizer whose special tokens sit at Qwen's ids, so prompts, chat template, EOS and padding
behave like the real model's, and any text encodes and decodes. The weights are noise: useful for speed and
memory, not for quality.
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


def build_random_model(arch: str, out_dir: str | os.PathLike, dtype: str = "bfloat16", seed: int = 0) -> dict:
    """Writes a random-init `arch` model + tokenizer to out_dir and returns its facts."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    started = time.time()
    config = arch_config(arch)
    # Shapes only on the meta device (no default init of hundreds of millions of weights), then memory is
    # allocated once in the target dtype and filled by our own init.
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    model = model.to(DTYPES[dtype]).to_empty(device="cpu")
    model.tie_weights()
    _init_weights(model, seed, config.initializer_range)
    model.config.dtype = DTYPES[dtype]

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)  # only parameters are saved; rotary buffers are rebuilt on load
    build_byte_tokenizer(model_max_length=config.max_position_embeddings).save_pretrained(out_dir)
    GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                     pad_token_id=config.pad_token_id).save_pretrained(out_dir)
    facts = {"arch": arch, "dtype": dtype, "seed": seed, "num_parameters": num_parameters(config),
             "build_seconds": round(time.time() - started, 1)}
    (out_dir / FACTS_FILE).write_text(json.dumps(facts, indent=1) + "\n")
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.models.random", description=__doc__.split("\n")[0])
    parser.add_argument("--arch", required=True, choices=sorted(ARCHS))
    parser.add_argument("--out", required=True, help="directory to write the model to")
    parser.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(json.dumps(build_random_model(args.arch, args.out, args.dtype, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
