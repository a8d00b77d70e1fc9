import random
import string

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from engine.models.tokenizer import QWEN_SPECIAL_IDS, build_byte_tokenizer, build_char_tokenizer


@pytest.fixture(scope="module")
def char_tok():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def byte_tok():
    return build_byte_tokenizer()


def random_texts(seed=0, count=50):
    rng = random.Random(seed)
    return [
        "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 80))) for _ in range(count)
    ] + ["", " ", "  leading and trailing  ", "a\n\nb\r\n\tc", "Janet’s ducks lay 16 eggs… 50% off — ½ € 中文 😀"]


def test_char_tokenizer_vocabulary(char_tok):
    assert isinstance(char_tok, PreTrainedTokenizerFast)
    assert len(char_tok) == 259
    assert char_tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [0, 1, 2]
    assert char_tok.pad_token == "<|endoftext|>" and char_tok.eos_token == "<|im_end|>"
    assert char_tok.bos_token is None
    for ch in string.printable:  # every printable ASCII character is exactly one token
        assert len(char_tok.encode(ch, add_special_tokens=False)) == 1, repr(ch)
    assert len(char_tok.encode("82+53=?")) == 7


@pytest.mark.parametrize("which", ["char_tok", "byte_tok"])
def test_round_trip(which, request):
    tok = request.getfixturevalue(which)
    for text in random_texts():
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text


def test_skip_special_tokens_and_chat_template(char_tok, byte_tok):
    messages = [{"role": "user", "content": "82+53=?"}]
    # the tiny model's compact template: one-letter roles, no newlines (14 tokens for this prompt)
    prompt = char_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == "<|im_start|>Q:82+53=?<|im_end|><|im_start|>A:"
    assert len(char_tok.encode(prompt)) == 14
    assert char_tok.apply_chat_template(messages, tokenize=False) == "<|im_start|>Q:82+53=?<|im_end|>"
    with_system = char_tok.apply_chat_template([{"role": "system", "content": "Be brief."}] + messages,
                                               tokenize=False, add_generation_prompt=True)
    assert with_system == "<|im_start|>S:Be brief.<|im_end|>" + prompt
    # the Qwen stand-in keeps Qwen's own format
    assert byte_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == \
        "<|im_start|>user\n82+53=?<|im_end|>\n<|im_start|>assistant\n"

    ids = char_tok.encode(prompt + "135<|im_end|>")
    assert ids.count(1) == 2 and ids[-1] == 2  # specials are single tokens, never spelled out
    assert char_tok.decode(ids, skip_special_tokens=True) == "Q:82+53=?A:135"
    assert char_tok.decode(ids) == prompt + "135<|im_end|>"


@pytest.mark.parametrize("which", ["char_tok", "byte_tok"])
def test_save_and_load_through_auto_tokenizer(which, request, tmp_path):
    tok = request.getfixturevalue(which)
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert len(loaded) == len(tok)
    assert (loaded.eos_token_id, loaded.pad_token_id) == (tok.eos_token_id, tok.pad_token_id)
    for text in random_texts(seed=1, count=10):
        assert loaded.encode(text) == tok.encode(text)
    assert loaded.chat_template == tok.chat_template


def test_byte_tokenizer_uses_qwen_ids(byte_tok):
    assert len(byte_tok) == 151646  # <= the 151936 rows of the embedding
    for token, token_id in QWEN_SPECIAL_IDS.items():
        assert byte_tok.convert_tokens_to_ids(token) == token_id
    assert byte_tok.eos_token_id == 151645 and byte_tok.pad_token_id == 151643
    # byte-level ids agree with Qwen2.5's vocabulary for single characters
    assert byte_tok.encode("!\n ") == [0, 198, 220]
    assert max(byte_tok.encode(string.printable * 3)) < 256
    prompt = byte_tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                          add_generation_prompt=True)
    assert byte_tok.encode(prompt)[0] == 151644
