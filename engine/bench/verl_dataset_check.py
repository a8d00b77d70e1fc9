"""Checks that the GSM8K parquet rlstudio writes (`python -m engine.data.gsm8k`) is what verl's own RLHFDataset reads,
with verl's own data config and a model's tokenizer, and that verl's default scorer (chosen by data_source) scores
its ground truth: prompt chat messages, data_source 'openai/gsm8k', reward_model.ground_truth, extra_info.index.
Runs where verl is importable (the device's verl site; a CPU test installs verl's wheel with --no-deps).

    python3 engine/bench/verl_dataset_check.py DATA_DIR MODEL_DIR
"""
from __future__ import annotations

import os
import sys


def check(data_dir: str, model_dir: str) -> dict:
    from hydra import compose, initialize_config_dir
    from transformers import AutoTokenizer

    import verl.trainer.main_ppo as main_ppo
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.reward_score import default_compute_score

    cfg_dir = os.path.join(os.path.dirname(main_ppo.__file__), "config")
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=[
            "data.max_prompt_length=512", "data.filter_overlong_prompts=True", "data.dataloader_num_workers=0"])
    tok = AutoTokenizer.from_pretrained(model_dir)
    out = {}
    for split in ("train", "test"):
        ds = RLHFDataset(os.path.join(data_dir, f"{split}.parquet"), tok, cfg.data)
        row = ds[0]
        msgs = row["raw_prompt"]
        assert isinstance(msgs, list) and msgs and msgs[-1]["role"] == "user" and msgs[-1]["content"], msgs
        assert row["data_source"] == "openai/gsm8k", row["data_source"]
        truth = row["reward_model"]["ground_truth"]
        assert default_compute_score("openai/gsm8k", f"so #### {truth}", truth) == 1.0, truth
        assert default_compute_score("openai/gsm8k", "so #### -98765", truth) == 0.0
        assert isinstance(row["extra_info"], dict) and "index" in row["extra_info"], row["extra_info"]
        out[split] = {"rows": len(ds), "first_question": msgs[-1]["content"][:60], "ground_truth": truth}
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        sys.exit(2)
    print("[verl_dataset_check]", check(sys.argv[1], sys.argv[2]))
