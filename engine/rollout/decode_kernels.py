"""Which of the static decoder's kernels run here: the Triton decode attention and the fused sampling, each only
where it can (CUDA, or Triton's interpreter on CPU), and only once it has agreed with the eager path on this model's
shapes (checked once per device and dtype; a failure warns and keeps the eager path)."""
from __future__ import annotations

import warnings

import torch

from engine.rollout.static_attention import grouped_attention, triton_runs_on


class KernelChoice:
    def __init__(self, triton_attention: bool, fused_sampling: bool):
        self.triton_attention = triton_attention  # GPU, bf16/fp16: kernels/decode_attention.py
        self._triton_checked: dict = {}  # (device, dtype) → the kernel agreed with the eager path
        self.fused_sampling = fused_sampling  # kernels/fused_sampling.py (plain and greedy sampling only)
        self._fused_checked: dict = {}  # (device, dtype) → the kernel agreed with torch
        self._said: set[str] = set()  # options asked for that cannot run here, told once each

    def use_triton(self, config, device: torch.device, dtype: torch.dtype) -> bool:
        """The Triton decode attention, on GPU in bf16/fp16, once it has agreed with the eager path on this
        model's head shapes (checked once per device and dtype; a failure warns and keeps the eager path)."""
        if not self.triton_attention:
            return False
        low = dtype in (torch.bfloat16, torch.float16) or device.type == "cpu"  # CPU: the interpreter, in fp32
        if not (triton_runs_on(device) and low):
            self.say_once(f"the Triton decode attention needs CUDA and bf16/fp16 weights (here {device}, {dtype}); "
                           "using the eager attention")
            return False
        return self._checked_once(self._triton_checked, lambda d, t: self._check_triton(config, d, t), device, dtype,
                                  "Triton decode attention")

    def say_once(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            print(f"[rlstudio] static decode: {message}", flush=True)

    @staticmethod
    def _checked_once(memo: dict, check, device: torch.device, dtype: torch.dtype, what: str) -> bool:
        """`check(device, dtype)` once per device and dtype, remembered in `memo`; says so when it passes."""
        key = (str(device), dtype)
        if key not in memo:
            memo[key] = check(device, dtype)
            if memo[key]:
                print(f"[rlstudio] static decode: {what} on ({device}, {dtype})", flush=True)
        return memo[key]

    def _check_triton(self, config, device: torch.device, dtype: torch.dtype) -> bool:
        from engine.rollout.kernels import decode_attention as da

        if not da.available():
            return False
        cfg = config
        n_q = cfg.num_attention_heads
        n_kv = getattr(cfg, "num_key_value_heads", None) or n_q
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_q
        try:
            g = torch.Generator(device=device).manual_seed(0)
            bsz, length = 5, 300
            q = torch.randn(bsz, 1, n_q, dim, device=device, generator=g).to(dtype).transpose(1, 2)
            k = torch.randn(bsz, n_kv, length, dim, device=device, generator=g).to(dtype)
            v = torch.randn(bsz, n_kv, length, dim, device=device, generator=g).to(dtype)
            valid = torch.rand(bsz, length, device=device, generator=g) > 0.2
            worst = 0.0
            for n in (1, 70, 129, length):
                valid[:, n - 1] = True
                mask = (valid & (torch.arange(length, device=device) < n))[:, None, None, :]
                ref, _ = grouped_attention(None, q.float(), k.float(), v.float(), mask, scaling=dim ** -0.5)
                out = da.decode_attention(q, k, v, mask, torch.tensor(n, device=device), dim ** -0.5)
                worst = max(worst, (out.float() - ref).abs().max().item())
            if worst > 3e-2:
                raise RuntimeError(f"max |difference| {worst:.3g} against the eager attention")
            return True
        except Exception as exc:  # noqa: BLE001
            warnings.warn(f"static decode: the Triton decode attention is off ({type(exc).__name__}: {exc}); "
                          "using the eager grouped attention")
            return False

    def use_fused(self, config, device: torch.device, dtype: torch.dtype, do_sample: bool, top_k: int,
                  top_p: float) -> bool:
        """The one-kernel sampling, for plain sampling (no top-k / top-p) and greedy decoding, once it has agreed
        with torch on this device and dtype (checked once; a failure warns and keeps the torch path)."""
        if not self.fused_sampling:
            return False
        if not triton_runs_on(device):
            self.say_once(f"fused sampling needs CUDA (here {device}); sampling with torch")
            return False
        if do_sample and ((top_k and top_k > 0) or top_p < 1.0):
            self.say_once("fused sampling covers plain sampling and greedy decoding; with top_k/top_p set this call "
                           "samples with torch")
            return False
        return self._checked_once(self._fused_checked, lambda d, t: self._check_fused(config, d, t), device, dtype,
                                  "fused sampling")

    def _check_fused(self, config, device: torch.device, dtype: torch.dtype) -> bool:
        from engine.rollout.kernels import fused_sampling as fs

        if not fs.available():
            return False
        try:
            fs.self_check(config.vocab_size, device, dtype)
            return True
        except Exception as exc:  # noqa: BLE001
            warnings.warn(f"static decode: fused sampling is off ({type(exc).__name__}: {exc}); sampling with torch")
            return False
