"""A small byte-level BPE tokenizer trained here on a line of text (no hub access): any text round-trips, with
Qwen-style specials (<|endoftext|> pads, <|im_end|> ends), optionally a BOS the post-processor adds and a chat
template. The unit tests that need a real subword tokenizer (not the tiny model's per-character one) build it here."""
from __future__ import annotations

from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build_bpe_tokenizer(path: Path, text: str, *, vocab_size: int = 400, bos: str | None = None,
                        chat_template: str | None = None):
    """Trains on `text` (five times), saves the tokenizer to `path` and returns it loaded back with AutoTokenizer,
    as the engine loads one. `bos`: a BOS token the post-processor puts before every sequence."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS + ([bos] if bos else []),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([text] * 5, trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A",
                                                           special_tokens=[(bos, tok.token_to_id(bos))])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 chat_template=chat_template)
    hf.save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)
