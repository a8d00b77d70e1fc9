"""`python -m engine.model_merger merge --backend fsdp --local_dir <ckpt>/global_step_N/actor --target_dir D`:
a PPO run on the tiny model (in this process, one worker, checkpoints at steps 1 and 2) is merged; D loads with
transformers and computes exactly what the trainer computed with its weights at that step (the final export's
logits; step 2's logged log-probs and values, which the step-1 actor and critic produced). Wrong arguments end
with one line naming the argument and exit code 2."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.integration.helpers import REPO, base_args, engine_env

RUN = {"algorithm.adv_estimator": "gae", "critic.optim.lr": "1e-4", "critic.ppo_micro_batch_size_per_gpu": 4,
       "trainer.n_gpus_per_node": 1, "data.train_batch_size": 8, "actor_rollout_ref.rollout.n": 2,
       "actor_rollout_ref.actor.ppo_mini_batch_size": 4,  # two mini-batches: the old log-prob pass runs
       "trainer.total_training_steps": 2, "trainer.save_freq": 1, "trainer.val_before_train": "False",
       "trainer.test_freq": -1}


@pytest.fixture(scope="module")
def ppo_run(tiny_model, arith_data, tmp_path_factory):
    from engine import train

    out = tmp_path_factory.mktemp("merger") / "run"
    train(base_args(tiny_model, arith_data, out, **RUN))
    return out


def merger(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.model_merger", *args], cwd=REPO, env=engine_env(), check=False,
                          capture_output=True, text=True, timeout=300)


def step_samples(run, step: int) -> list[dict]:
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r["step"] == step and r["split"] == "train"]


def sequence(tokenizer, sample: dict) -> tuple[torch.Tensor, int] | None:
    """The sample's token ids, or None where a logged token string does not map back to one id (a sampled id
    beyond the tokenizer's vocabulary)."""
    prompt = tokenizer(sample["prompt"], add_special_tokens=False)["input_ids"]
    response = tokenizer.convert_tokens_to_ids(sample["tokens"])
    return None if None in response else (torch.tensor([prompt + response]), len(prompt))


def test_merged_checkpoints_compute_what_the_trainer_computed(ppo_run, tmp_path):
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

    from engine.model_merger import merge

    result = merger("merge", "--backend", "fsdp", "--local_dir", str(ppo_run / "global_step_2" / "actor"),
                    "--target_dir", str(tmp_path / "step2"))
    assert result.returncode == 0, result.stderr[-3000:]
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "step2").eval()
    exported = AutoModelForCausalLM.from_pretrained(ppo_run / "hf_model").eval()  # the trainer's step-2 weights
    ids = torch.randint(0, merged.config.vocab_size, (3, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(merged(ids).logits, exported(ids).logits)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "step2")
    assert tokenizer.get_vocab() == AutoTokenizer.from_pretrained(ppo_run / "hf_model").get_vocab()

    # step 2's old log-probs and values came from the weights saved at step 1
    actor = AutoModelForCausalLM.from_pretrained(merge(str(ppo_run / "global_step_1" / "actor"), str(tmp_path / "a1")))
    critic = AutoModelForTokenClassification.from_pretrained(
        merge(str(ppo_run / "global_step_1" / "critic"), str(tmp_path / "c1")))
    samples = step_samples(ppo_run, 2)
    assert len(samples) == 16
    checked = 0
    with torch.no_grad():
        for sample in samples:
            if (seq := sequence(tokenizer, sample)) is None:
                continue
            ids, p = seq
            checked += 1
            n = len(sample["tokens"])
            log_probs = torch.log_softmax(actor.eval()(ids).logits[0, p - 1:p - 1 + n].float(), -1)
            got = log_probs.gather(-1, ids[0, p:, None])[:, 0]
            torch.testing.assert_close(got, torch.tensor(sample["old_log_probs"]), atol=2e-5, rtol=0)
            values = critic.eval()(ids).logits[0, p - 1:p - 1 + n, 0]
            torch.testing.assert_close(values, torch.tensor(sample["values"]), atol=2e-5, rtol=0)
    assert checked >= 8
    # the step-1 actor is not the step-2 one: the comparison above can tell steps apart
    from engine.model_merger.__main__ import main

    assert main(["test", "--backend", "fsdp", "--local_dir", str(ppo_run / "global_step_1" / "actor"),
                 "--test_hf_dir", str(tmp_path / "step2")]) == 1


def test_wrong_arguments_are_one_line_and_exit_2(ppo_run, tmp_path, capsys):
    from engine.model_merger.__main__ import main

    result = merger("merge", "--backend", "fsdp", "--local_dir", str(ppo_run / "global_step_9" / "actor"),
                    "--target_dir", str(tmp_path / "out"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [(
        f"Error: --local_dir {ppo_run}/global_step_9/actor: there is no step 9 in {ppo_run} (saved steps there: 1, "
        "2); pick one of those steps")]
    assert main(["merge", "--backend", "megatron", "--local_dir", str(ppo_run / "global_step_2" / "actor")]) == 2
    assert capsys.readouterr().err.strip() == (
        "Error: --backend megatron: rlstudio saves FSDP2 checkpoints only; use --backend fsdp")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("local_dir, words", [
    (None, "--local_dir is required"),
    ("{run}/nowhere/actor", "no such folder"),
    ("{run}/global_step_2/reference", "global_step_2 has no 'reference' folder (it has: actor, critic)"),
    ("{run}/global_step_2", "is a whole step; add the role: --local_dir {run}/global_step_2/actor"),
    ("{run}", "is the checkpoint root; name a step and a role, e.g. --local_dir {run}/global_step_2/actor"),
    ("{run}/global_step_2/actor/huggingface", "not an rlstudio FSDP checkpoint (no .metadata inside)"),
    ("{run}/metrics.jsonl", "is a file, not a checkpoint folder"),
])
def test_each_wrong_local_dir_names_the_fix(ppo_run, tmp_path, capsys, local_dir, words):
    from engine.model_merger.__main__ import main

    args = ["merge", "--backend", "fsdp", "--target_dir", str(tmp_path / "out")]
    if local_dir is not None:
        args += ["--local_dir", local_dir.format(run=ppo_run)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words.format(run=ppo_run) in err, err
    assert not (tmp_path / "out").exists()


def test_base_model_is_refused_for_full_weights(ppo_run, tiny_model, tmp_path, capsys):
    from engine.model_merger.__main__ import main

    actor = ppo_run / "global_step_2" / "actor"
    assert main(["merge", "--backend", "fsdp", "--local_dir", str(actor), "--target_dir", str(tmp_path / "out"),
                 "--base_model", tiny_model]) == 2
    assert capsys.readouterr().err.strip() == (
        f"Error: --base_model {tiny_model}: --local_dir {actor} holds full weights, not a LoRA adapter (no "
        "lora/adapter_config.json); drop --base_model")
    assert not (tmp_path / "out").exists()


def test_upload_is_refused_with_the_alternative(ppo_run, capsys):
    from engine.model_merger.__main__ import main

    assert main(["merge", "--backend", "fsdp", "--local_dir", str(ppo_run / "global_step_2" / "actor"),
                 "--hf_upload_path", "me/model"]) == 2
    assert "merge into --target_dir, then upload that folder" in capsys.readouterr().err
