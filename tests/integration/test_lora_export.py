"""Exports of a LoRA run, checked against peft itself. A real worker (lora_export_probe.py, in a subprocess) trains a
LoRA actor and a LoRA critic one step, saves a checkpoint and exports the actor (`trainer.export_hf_model`): the
merged model and `lora_adapter/` (PEFT's layout). Then:
- the merged weights rlstudio writes equal peft's `merge_and_unload()` of the adapter it wrote (fp32 tolerance),
- the adapter loaded by `PeftModel.from_pretrained` (and by `lora_adapter_path`, as a new run starts from it) and
  the merged model compute the trained actor's log-probs,
- `python -m engine.model_merger merge` on the checkpoint (adapter only) writes the same two things, for the critic
  too (its value head as modules_to_save), from the checkpoint plus the base path it recorded,
- a checkpoint whose base model is gone names `--base_model`, and works with it."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.integration.helpers import REPO, engine_env

PROBE = Path(__file__).with_name("lora_export_probe.py")


@pytest.fixture(scope="module")
def lora_run(tiny_model, arith_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lora-export")
    run = subprocess.run([sys.executable, str(PROBE), tiny_model, str(arith_data), str(out)], cwd=REPO,
                         env=engine_env(), capture_output=True, text=True, timeout=600, check=False)
    assert "PROBE done" in run.stdout, f"probe failed (exit {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    return out


def merger(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.model_merger", *args], cwd=REPO, env=engine_env(),
                          check=False, capture_output=True, text=True, timeout=300)


def merger_here(capsys, *args: str) -> tuple[int, str, str]:
    """The merger's command line in this process (the subprocess above costs ~10 s of imports a call)."""
    from engine.model_merger.__main__ import main

    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().float() for k, v in model.state_dict().items()}


def assert_same_weights(got: dict, want: dict, atol: float) -> None:
    assert got.keys() == want.keys(), (sorted(got.keys() ^ want.keys())[:5])
    worst = max((got[k] - want[k]).abs().max().item() for k in want)
    assert worst <= atol, f"largest |difference| {worst:.3g}"


def response_outputs(model, trained: dict) -> torch.Tensor:
    """The model's log-prob of each response token (a causal LM) or its value at the position before it (a value
    model), as the trainer computes them from left-padded prompt + response rows; 0 off the response."""
    width = trained["responses"].shape[1]
    with torch.no_grad():
        logits = model(input_ids=trained["input_ids"], attention_mask=trained["attention_mask"],
                       position_ids=trained["position_ids"]).logits[:, -width - 1:-1].float()
    if logits.shape[-1] == 1:
        out = logits[..., 0]
    else:
        out = torch.log_softmax(logits, -1).gather(-1, trained["responses"][..., None])[..., 0]
    return out * trained["response_mask"]


def peft_pair(base_cls, base_path: str, adapter_dir: Path, **kwargs):
    """(the adapter loaded by peft onto a fresh base, peft's merge_and_unload() of another such copy)."""
    from peft import PeftModel

    unmerged = PeftModel.from_pretrained(base_cls.from_pretrained(base_path, **kwargs), adapter_dir).eval()
    merged = PeftModel.from_pretrained(base_cls.from_pretrained(base_path, **kwargs), adapter_dir).merge_and_unload()
    return unmerged, merged.eval()


def test_export_is_the_merged_model_and_the_adapter_as_peft_has_them(lora_run, tiny_model):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    export = lora_run / "hf_model"
    adapter = export / "lora_adapter"
    assert (adapter / "adapter_config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(Path(tiny_model).resolve()) and config["r"] == 8
    assert not (export / "adapter_config.json").exists()  # transformers would load the top folder as an adapter
    trained = torch.load(lora_run / "trained.pt")
    ours = AutoModelForCausalLM.from_pretrained(export).eval()  # a plain HF model: the merged weights
    assert type(ours).__name__ == "Qwen2ForCausalLM"
    base = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    unmerged, peft_merged = peft_pair(AutoModelForCausalLM, tiny_model, adapter)
    assert isinstance(unmerged, PeftModel)

    # the differential check: rlstudio's merge (W + scale · B A) == peft's merge_and_unload() of the saved adapter
    assert_same_weights(weights(ours), weights(peft_merged), atol=1e-6)
    # ... and the update did move the weights (the check above could tell a merge that left the adapter out)
    moved = max((weights(ours)[k] - v).abs().max().item() for k, v in weights(base).items())
    assert moved > 1e-3, moved
    # the adapter as peft runs it (unmerged) and the merged model compute the trained actor's log-probs
    want = trained["log_probs"] * trained["response_mask"]  # the worker's are not masked past the end
    torch.testing.assert_close(response_outputs(unmerged, trained), want, atol=1e-5, rtol=0)
    torch.testing.assert_close(response_outputs(ours, trained), want, atol=1e-5, rtol=0)
    assert (response_outputs(base, trained) - want).abs().max() > 1e-2  # the base model computes something else
    # a new run starts from it: actor_rollout_ref.model.lora_adapter_path=<export>/lora_adapter
    from types import SimpleNamespace

    from engine.adapters import lora

    resumed = lora.wrap(AutoModelForCausalLM.from_pretrained(tiny_model), SimpleNamespace(lora_adapter_path=str(adapter)))
    assert 0 < lora.parameter_counts(resumed)["trainable"] < lora.parameter_counts(resumed)["total"] / 10
    torch.testing.assert_close(response_outputs(resumed.eval(), trained), want, atol=1e-5, rtol=0)


def test_merger_writes_the_same_model_and_adapter_from_the_checkpoint(lora_run, tiny_model, tmp_path, capsys):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    actor_dir = lora_run / "ckpt" / "global_step_1" / "actor"
    assert (actor_dir / "lora" / "adapter_config.json").is_file()  # recorded at save time: config + base path
    assert json.loads((actor_dir / "huggingface" / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    result = merger("merge", "--backend", "fsdp", "--local_dir", str(actor_dir), "--target_dir", str(tmp_path / "a"))
    assert result.returncode == 0, result.stderr[-3000:]
    export = lora_run / "hf_model"
    # the checkpoint's adapter is the exported one, and so is the merged model (both from the same step's weights)
    assert_same_weights(load_file(tmp_path / "a" / "lora_adapter" / "adapter_model.safetensors"),
                        load_file(export / "lora_adapter" / "adapter_model.safetensors"), atol=0.0)
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "a").eval()
    assert_same_weights(weights(merged), weights(AutoModelForCausalLM.from_pretrained(export)), atol=1e-6)
    _, peft_merged = peft_pair(AutoModelForCausalLM, tiny_model, tmp_path / "a" / "lora_adapter")
    assert_same_weights(weights(merged), weights(peft_merged), atol=1e-6)
    code, out, err = merger_here(capsys, "test", "--backend", "fsdp", "--local_dir", str(actor_dir),
                                 "--test_hf_dir", str(export))
    assert code == 0 and out.startswith("Same weights"), out + err

    # the LoRA critic: a one-label value model whose new head trained in full (peft's modules_to_save)
    code, _, err = merger_here(capsys, "merge", "--backend", "fsdp", "--local_dir", str(actor_dir.with_name("critic")),
                               "--target_dir", str(tmp_path / "c"))
    assert code == 0, err[-3000:]
    trained = torch.load(lora_run / "trained.pt")
    assert trained["values"].abs().sum() > 0  # masked as the comparison below is
    critic = AutoModelForTokenClassification.from_pretrained(tmp_path / "c").eval()
    torch.testing.assert_close(response_outputs(critic, trained), trained["values"], atol=1e-5, rtol=0)
    unmerged, peft_merged = peft_pair(AutoModelForTokenClassification, tiny_model, tmp_path / "c" / "lora_adapter",
                                      num_labels=1)
    torch.testing.assert_close(response_outputs(unmerged, trained), trained["values"], atol=1e-5, rtol=0)
    assert_same_weights(weights(critic), weights(peft_merged), atol=1e-6)


def test_a_missing_base_model_is_named_with_the_fix(lora_run, tiny_model, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    moved = tmp_path / "actor"  # the checkpoint on another machine: the base path it recorded is not there
    shutil.copytree(lora_run / "ckpt" / "global_step_1" / "actor", moved)
    config_file = moved / "lora" / "adapter_config.json"
    config = json.loads(config_file.read_text())
    config["base_model_name_or_path"] = str(tmp_path / "gone" / "tiny-model")
    config_file.write_text(json.dumps(config))
    code, _, err = merger_here(capsys, "merge", "--backend", "fsdp", "--local_dir", str(moved), "--target_dir",
                               str(tmp_path / "out"))
    assert code == 2 and err.strip().splitlines() == [(
        f"Error: --local_dir {moved}: a LoRA checkpoint holds the adapter only, and its base model "
        f"{tmp_path}/gone/tiny-model (lora/adapter_config.json) is not there; pass --base_model PATH: the run's "
        "actor_rollout_ref.model.path")]
    assert not (tmp_path / "out").exists()
    code, _, err = merger_here(capsys, "merge", "--backend", "fsdp", "--local_dir", str(moved), "--target_dir",
                               str(tmp_path / "out"), "--base_model", str(tmp_path / "nowhere"))
    assert code == 2 and err.strip() == (f"Error: --base_model {tmp_path}/nowhere: no model folder there (no "
                                         "config.json); pass the run's actor_rollout_ref.model.path")
    code, _, err = merger_here(capsys, "merge", "--backend", "fsdp", "--local_dir", str(moved), "--target_dir",
                               str(tmp_path / "out"), "--base_model", tiny_model)
    assert code == 0, err[-3000:]
    assert_same_weights(weights(AutoModelForCausalLM.from_pretrained(tmp_path / "out")),
                        weights(AutoModelForCausalLM.from_pretrained(lora_run / "hf_model")), atol=1e-6)
