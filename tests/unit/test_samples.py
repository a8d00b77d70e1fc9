"""Sample records: every token is a string, also ids beyond the tokenizer's vocabulary."""
from __future__ import annotations

from engine.trainer.samples import token_strings


def test_token_strings_are_text_even_for_padded_vocab_ids(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    ids = tok("12 +", add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids("<|im_end|>"), len(tok) + 3]
    pieces = token_strings(tok, ids)
    assert pieces[:4] == ["1", "2", " ", "+"]
    assert pieces[4] == "<|im_end|>" and pieces[5] == f"<id:{len(tok) + 3}>"
    assert all(isinstance(p, str) for p in pieces)


def test_samples_carry_policy_versions_and_staleness():
    """An answer whose tokens came from two weight versions (a partial rollout across an update) and one from a
    single older version, trained at step 5 (version 4): verl's staleness counts from the newest token, the worst
    from the oldest; padding is not part of the answer."""
    import torch

    from engine.models.tokenizer import build_char_tokenizer
    from engine.protocol import Batch
    from engine.trainer.samples import build_samples

    tok = build_char_tokenizer()
    ids = [tok.encode(t, add_special_tokens=False) for t in ("abc", "de")]
    responses = torch.full((2, 3), tok.pad_token_id)
    mask = torch.zeros((2, 3), dtype=torch.long)
    for r, e in enumerate(ids):
        responses[r, :len(e)] = torch.tensor(e)
        mask[r, :len(e)] = 1
    batch = Batch({"responses": responses, "response_mask": mask, "token_level_scores": torch.zeros(2, 3),
                   "policy_versions": torch.tensor([[3, 3, 4], [2, 2, 9]])})
    first, second = build_samples(batch, tok, 5, "train", ["abc", "de"])
    assert first["policy_versions"] == [3, 3, 4] and len(first["policy_versions"]) == len(first["tokens"])
    assert (first["policy_version_min"], first["policy_version_max"]) == (3, 4)
    assert (first["staleness"], first["staleness_worst"]) == (0, 1)
    assert second["policy_versions"] == [2, 2]  # the padded position's 9 is not a token of the answer
    assert (second["policy_version_min"], second["policy_version_max"], second["staleness"],
            second["staleness_worst"]) == (2, 2, 2, 2)
    assert all(isinstance(v, int) for v in first["policy_versions"] + [first["staleness"]])
    # without token arrays the summary stays; a batch without versions carries none of it
    assert "policy_versions" not in build_samples(batch, tok, 5, "train", ["abc", "de"], token_level=False)[0]
    assert build_samples(batch, tok, 5, "train", ["abc", "de"], token_level=False)[0]["staleness"] == 0
    del batch.tensors["policy_versions"]
    assert not {"policy_versions", "staleness", "policy_version_min"} & set(build_samples(batch, tok, 5, "train",
                                                                                          ["abc", "de"])[0])
