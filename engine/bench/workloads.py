"""Fixed benchmark workloads: model, batch shape, algorithm settings; and what is shared by every implementation
that runs them (the random model directory, the synthetic prompts, the reward)."""
from __future__ import annotations

import dataclasses
import os
import zlib

import torch


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    arch: str                 # engine.models.random architecture
    prompts: int              # prompts per step
    n: int                    # samples per prompt (GRPO group)
    prompt_len: int           # exact prompt tokens
    response_len: int         # exact response tokens (min = max new tokens)
    micro: int                # sequences per forward/backward (TRL: per_device_train_batch_size)
    kl_coef: float = 0.04     # reference KL loss weight (TRL's beta)
    lr: float = 1e-6

    @property
    def sequences(self) -> int:
        return self.prompts * self.n


WORKLOADS = {
    # W1 (tracker issue 6): Qwen2.5-0.5B shapes, 64 x 8 = 512 sequences of 256 + 256 tokens, micro-batch 32.
    "w1": Workload("w1", "qwen2.5-0.5b", prompts=64, n=8, prompt_len=256, response_len=256, micro=32),
    # The same step on toy shapes (Qwen's vocabulary, a 2-layer body): for CPU tests of the bench itself.
    "tiny": Workload("tiny", "tiny-qwen2", prompts=4, n=2, prompt_len=16, response_len=8, micro=4),
}


def model_dir(workload: Workload, root: str | None = None) -> str:
    """The random-init model of the workload's architecture (built once, then reused from the cache)."""
    from engine.builtins import cache_dir
    from engine.models.random import FACTS_FILE, build_random_model

    root = root or os.path.join(cache_dir(), "bench-models")
    path = os.path.join(root, workload.arch)
    if not os.path.exists(os.path.join(path, FACTS_FILE)):
        build_random_model(workload.arch, path, dtype="bfloat16", seed=0)
    return path


def prompt_token_ids(workload: Workload, vocab_size: int, seed: int = 0) -> torch.Tensor:
    """[prompts, prompt_len] token ids drawn uniformly from the ordinary (non-special) vocabulary."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (workload.prompts, workload.prompt_len), generator=generator)


def bench_score(data_source=None, solution_str: str = "", ground_truth=None, extra_info=None, **_) -> float:
    """A cheap deterministic pseudo-random reward in [0, 1) of the answer text: random weights give random
    answers, and GRPO needs rewards that differ within a group so that advantages are not all zero."""
    return (zlib.crc32(solution_str.encode("utf-8", "replace")) % 1000) / 1000.0
