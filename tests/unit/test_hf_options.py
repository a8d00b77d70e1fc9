"""`actor_rollout_ref.rollout.engine_kwargs.hf.*`: the HF rollout's options, their defaults per device, flags
given as the strings a command line passes, and a refusal that names the key and the fix."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from engine.rollout.hf_rollout import hf_options


def rollout(**hf):
    return OmegaConf.create({"engine_kwargs": {"hf": hf}})


def test_defaults_per_device():
    gpu, cpu = hf_options(rollout(), "cuda"), hf_options(rollout(), "cpu")
    assert gpu == {"decode": "static", "exact": False, "cuda_graphs": True, "compile": True, "compact_every": 32,
                   "triton_attention": True, "fused_sampling": True, "compile_step": True}
    assert cpu["decode"] == "generate" and cpu["compile"] is False
    assert not (cpu["triton_attention"] or cpu["fused_sampling"] or cpu["compile_step"])


def test_exact_mode_decodes_static_and_eagerly_on_every_device():
    for device in ("cuda", "cpu"):
        opts = hf_options(OmegaConf.create({"engine_kwargs": {"hf": {}}, "exact": True}), device)
        assert opts["decode"] == "static" and opts["exact"] is True
        assert not (opts["cuda_graphs"] or opts["compile"] or opts["triton_attention"] or opts["fused_sampling"]
                    or opts["compile_step"])


def test_flags_from_command_line_strings():
    opts = hf_options(rollout(triton_attention="true", fused_sampling="True", compile_step=True, cuda_graphs="false",
                              compact_every="0"), "cuda")
    assert opts["triton_attention"] and opts["fused_sampling"] and opts["compile_step"]
    assert opts["cuda_graphs"] is False and opts["compact_every"] == 0


@pytest.mark.parametrize("hf, needle", [({"decode": "vllm"}, "hf.decode='vllm': use static or generate"),
                                        ({"compact_every": "-3"}, "hf.compact_every='-3': use a number")])
def test_bad_values_name_the_key(hf, needle):
    with pytest.raises(ValueError, match="actor_rollout_ref.rollout.engine_kwargs." + needle.replace("(", r"\(")):
        hf_options(rollout(**hf), "cuda")
