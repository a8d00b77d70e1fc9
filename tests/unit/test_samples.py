"""Sample records: every token is a string, also ids beyond the tokenizer's vocabulary."""
from __future__ import annotations

from engine.models.tiny import ensure_tiny_model
from engine.trainer.samples import token_strings


def test_token_strings_are_text_even_for_padded_vocab_ids(tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ensure_tiny_model(tmp_path / "tiny"))
    ids = tok("12 +", add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids("<|im_end|>"), len(tok) + 3]
    pieces = token_strings(tok, ids)
    assert pieces[:4] == ["1", "2", " ", "+"]
    assert pieces[4] == "<|im_end|>" and pieces[5] == f"<id:{len(tok) + 3}>"
    assert all(isinstance(p, str) for p in pieces)
