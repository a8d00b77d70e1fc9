"""Tokenizers for the built-in models: one token per byte, Qwen's special tokens, and Qwen's chat format (the tiny
model's in a compact form, TINY_CHAT_TEMPLATE).

Both are Qwen2Tokenizer (a PreTrainedTokenizerFast) with a BPE vocabulary of the 256 byte-level symbols and
no merges. Saved model directories say model_type "qwen2", and transformers then always loads the tokenizer
as Qwen2Tokenizer, which rebuilds Qwen's normalizer / pre-tokenizer / decoder around the saved vocabulary;
building it as that same class here means what we test is what every later load gets.

Every printable ASCII character is one token (so "82+53=?" is 7 tokens), and because all 256 bytes are in the
vocabulary any UTF-8 text encodes and decodes back unchanged; no unknown token is needed.
"""
from __future__ import annotations

from transformers import Qwen2Tokenizer

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
QWEN_SPECIAL_IDS = {ENDOFTEXT: 151643, IM_START: 151644, IM_END: 151645}

# Qwen's chat format, with no default system prompt (prompts stay short); a system message is rendered
# only when the conversation has one.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# The tiny model's compact form of the same turns: a one-letter role and no newlines, so "82+53=?" becomes a
# 14-token prompt instead of 26. With only 2 layers, every template token between the question and the answer
# is a distractor; the short form measurably helps RL (docs/tiny-model.md).
TINY_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- set role = {'system': 'S', 'user': 'Q', 'assistant': 'A'}.get(message['role'], message['role']) %}"
    "{{- '<|im_start|>' + role + ':' + message['content'] + '<|im_end|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>A:' }}{%- endif %}"
)


def byte_symbols() -> list[str]:
    """The 256 byte-level symbols (GPT-2's bytes_to_unicode) in GPT-2/Qwen vocabulary order: "!" is first."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols = {b: chr(b) for b in printable}
    # the remaining bytes (controls, space, ...) map to code points from 256 up, in byte order
    for offset, b in enumerate(b for b in range(256) if b not in symbols):
        symbols[b] = chr(256 + offset)
    return [symbols[b] for b in printable] + [symbols[b] for b in range(256) if b not in printable]


def _make(vocab: dict[str, int], model_max_length: int, chat_template: str = CHAT_TEMPLATE) -> Qwen2Tokenizer:
    return Qwen2Tokenizer(
        vocab=vocab, merges=[], unk_token=None, bos_token=None, eos_token=IM_END, pad_token=ENDOFTEXT,
        extra_special_tokens=[IM_START], chat_template=chat_template, clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
    )


def build_char_tokenizer(model_max_length: int = 512) -> Qwen2Tokenizer:
    """The tiny model's tokenizer: specials at ids 0-2 (<|endoftext|> = pad, <|im_start|>, <|im_end|> = eos),
    then the 256 byte symbols: 259 tokens."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for symbol in byte_symbols():
        vocab[symbol] = len(vocab)
    return _make(vocab, model_max_length, TINY_CHAT_TEMPLATE)


def build_byte_tokenizer(model_max_length: int = 32768) -> Qwen2Tokenizer:
    """A stand-in for Qwen2.5's tokenizer: bytes at ids 0-255, never-produced filler tokens, and the special
    tokens at Qwen's own ids (151643-151645), so token ids mean the same as in the real model."""
    vocab = {symbol: i for i, symbol in enumerate(byte_symbols())}
    for i in range(len(vocab), QWEN_SPECIAL_IDS[ENDOFTEXT]):
        vocab[f"<|filler_{i}|>"] = i  # no merges produce these, so encoding never emits them
    vocab.update(QWEN_SPECIAL_IDS)
    return _make(vocab, model_max_length)
