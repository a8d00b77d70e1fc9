"""RewardManager, the default data_source dispatcher and custom reward functions."""
from __future__ import annotations

import json
import textwrap

import pytest
import torch

from engine.protocol import Batch
from engine.reward import RewardFunctionError, RewardManager, default_compute_score, load_custom_reward_fn
from tests.unit.bpe_tokenizer import build_bpe_tokenizer

QWEN_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return build_bpe_tokenizer(tmp_path_factory.mktemp("tok"), "The answer is #### 72 because 0123456789 step by step",
                               chat_template=QWEN_TEMPLATE)


def make_batch(tokenizer, texts, sources, truths, extra_infos=None, width=None, eos=True):
    """Right-padded responses (each ending in eos when `eos`), with response_mask."""
    seqs = [tokenizer(t, add_special_tokens=False)["input_ids"] + ([tokenizer.eos_token_id] if eos else [])
            for t in texts]
    width = width or max(len(s) for s in seqs) + 2
    responses = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        responses[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    meta = {"data_source": sources, "ground_truth": truths,
            "extra_info": extra_infos or [{"index": i} for i in range(len(seqs))]}
    return Batch({"responses": responses, "response_mask": mask}, meta), [len(s) for s in seqs]


# ---- default scorer --------------------------------------------------------------------------------
def test_default_dispatch_gsm8k_and_unknown():
    assert default_compute_score("openai/gsm8k", "so #### 72", "72") == 1.0
    assert default_compute_score("gsm8k", "so #### 71", "72") == 0.0
    # a shaped score keeps verl's strict accuracy beside it (held-out accuracy is then val-core/.../acc)
    assert default_compute_score("openai/gsm8k", "so #### 71", "72", format_score=0.1) == {"score": 0.1, "acc": 0.0}
    assert default_compute_score("openai/gsm8k", "so #### 72", "72", format_score=0.1) == {"score": 1.0, "acc": 1.0}
    assert default_compute_score("openai/gsm8k", "no answer", "72", format_score=0.1) == {"score": 0.0, "acc": 0.0}
    with pytest.raises(NotImplementedError) as e:
        default_compute_score("my/task", "x", "y")
    assert "'my/task'" in str(e.value) and "custom_reward_function.path=" in str(e.value)


def test_default_dispatch_arith():
    arith = pytest.importorskip("engine.reward.arith", reason="engine.reward.arith not written yet")
    assert default_compute_score("arith", "135", "135") == arith.compute_score("135", "135") == 1.0
    assert default_compute_score("arith", "136", "135") == 0.0


# ---- manager ---------------------------------------------------------------------------------------
def test_manager_gsm8k_scores_and_placement(tokenizer):
    texts = ["so the answer is #### 72", "#### 5", "I do not know"]
    batch, lengths = make_batch(tokenizer, texts, ["openai/gsm8k"] * 3, ["72", "6", "1"])
    res = RewardManager(tokenizer)(batch)
    assert res.scores == [1.0, 0.0, 0.0]
    assert res.response_texts == texts  # eos and padding are not in the decoded text
    assert res.token_level_scores.dtype == torch.float32
    assert res.token_level_scores.shape == batch["responses"].shape
    assert res.token_level_scores[0, lengths[0] - 1] == 1.0  # on the eos, the last valid token
    assert res.token_level_scores.sum().item() == 1.0
    assert res.extra == {}


def test_manager_decodes_once(tokenizer):
    class Counting:
        def __init__(self, tok):
            self.tok, self.calls = tok, 0

        def batch_decode(self, *a, **k):
            self.calls += 1
            return self.tok.batch_decode(*a, **k)

    batch, _ = make_batch(tokenizer, ["#### 1", "#### 2"], ["gsm8k"] * 2, ["1", "2"])
    counting = Counting(tokenizer)
    assert RewardManager(counting)(batch).scores == [1.0, 1.0]
    assert counting.calls == 1


def test_manager_reward_fn_key_and_kwargs(tokenizer):
    seen = []

    def fn(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
        seen.append((data_source, ground_truth, extra_info["index"]))
        return float(solution_str == ground_truth) + bonus

    batch, _ = make_batch(tokenizer, ["a", "b"], ["x", "x"], ["a", "c"])
    batch.meta["task"] = batch.meta["data_source"].copy()
    batch.meta["task"][:] = ["t1", "t2"]
    res = RewardManager(tokenizer, compute_score=fn, reward_fn_key="task", reward_kwargs={"bonus": 0.5})(batch)
    assert res.scores == [1.5, 0.5]
    assert seen == [("t1", "a", 0), ("t2", "c", 1)]


def test_manager_scores_empty_response(tokenizer):
    batch, _ = make_batch(tokenizer, ["#### 3", ""], ["gsm8k"] * 2, ["3", "3"], eos=False)
    res = RewardManager(tokenizer, compute_score=lambda **k: 2.0)(batch)
    assert res.response_texts == ["#### 3", ""]
    assert res.token_level_scores.sum(-1).tolist() == [2.0, 2.0]


# ---- custom reward functions -----------------------------------------------------------------------
CUSTOM = textwrap.dedent('''
    import math

    THRESHOLD = 3

    def compute_score(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):
        out = {"score": scale * float(solution_str.strip() == ground_truth), "length": len(solution_str)}
        if len(solution_str) > THRESHOLD:
            out["long"] = True
        return out

    def boom(data_source, solution_str, ground_truth, extra_info=None):
        raise ValueError("bad input")

    def helper(x):
        return x
''')


@pytest.fixture
def custom_file(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(CUSTOM)
    return path


def test_custom_dict_return_extra_columns(tokenizer, custom_file):
    fn = load_custom_reward_fn(custom_file, reward_kwargs={"scale": 3.0})
    assert fn.__name__ == "compute_score"
    batch, lengths = make_batch(tokenizer, ["ok", "wrong answer"], ["any", "any"], ["ok", "no"])
    res = RewardManager(tokenizer, compute_score=fn)(batch)
    assert res.scores == [3.0, 0.0]
    assert res.extra == {"length": [2, 12], "long": [None, True]}
    assert res.token_level_scores[0, lengths[0] - 1] == 3.0
    assert RewardManager(tokenizer, compute_score=load_custom_reward_fn(str(custom_file)),
                         reward_kwargs={"scale": 2.0})(batch).scores == [2.0, 0.0]


def test_custom_function_error_is_wrapped(tokenizer, custom_file):
    fn = load_custom_reward_fn(custom_file, name="boom")
    long_text = "z" * 150 + "y" * 150
    batch, _ = make_batch(tokenizer, [long_text], ["my/source"], ["1"])
    with pytest.raises(RuntimeError) as e:
        RewardManager(tokenizer, compute_score=fn)(batch)
    msg = str(e.value)
    assert "boom" in msg and "'my/source'" in msg and "bad input" in msg
    assert "z" * 150 + "y" * 50 in msg and "y" * 51 not in msg  # first 200 characters only


def test_default_scorer_errors_pass_through(tokenizer):
    batch, _ = make_batch(tokenizer, ["x"], ["unknown/src"], ["1"])
    with pytest.raises(NotImplementedError, match="custom_reward_function.path"):
        RewardManager(tokenizer)(batch)


def test_bad_return_values(tokenizer):
    batch, _ = make_batch(tokenizer, ["x"], ["s"], ["1"])
    with pytest.raises(RuntimeError, match="'score' key"):
        RewardManager(tokenizer, compute_score=lambda **k: {"acc": 1})(batch)
    with pytest.raises(RuntimeError, match="expected a number"):
        RewardManager(tokenizer, compute_score=lambda **k: "high")(batch)


def test_load_errors(tmp_path, custom_file):
    with pytest.raises(RewardFunctionError) as e:
        load_custom_reward_fn(tmp_path / "absent.py")
    assert "absent.py" in str(e.value) and "custom_reward_function.path" in str(e.value)
    with pytest.raises(RewardFunctionError) as e:
        load_custom_reward_fn(custom_file, name="score_it")
    msg = str(e.value)
    assert "'score_it'" in msg and "custom_reward_function.name" in msg
    assert "['boom', 'compute_score', 'helper']" in msg  # the file's own functions, not `math`
    with pytest.raises(RewardFunctionError, match="not a function"):
        load_custom_reward_fn(custom_file, name="THRESHOLD")
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    with pytest.raises(RewardFunctionError, match="broken.py"):
        load_custom_reward_fn(broken)


# ---- data -> reward, end to end --------------------------------------------------------------------
def test_dataset_batch_meta_feeds_manager(tmp_path, tokenizer):
    from engine.data.dataset import PromptLoader, RLDataset

    rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"q{i}"}],
             "reward_model": {"style": "rule", "ground_truth": str(i)}, "extra_info": {"index": i}} for i in range(4)]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prompts = next(PromptLoader(RLDataset(path, tokenizer), batch_size=4, seed=0))
    truths = list(prompts.meta["ground_truth"])
    answers = [f"#### {t}" if k % 2 == 0 else "#### 99" for k, t in enumerate(truths)]
    responses, _ = make_batch(tokenizer, answers, ["ignored"] * 4, ["ignored"] * 4)
    batch = prompts.union(responses.select(meta_keys=[]))
    assert RewardManager(tokenizer)(batch).scores == [1.0, 0.0, 1.0, 0.0]
